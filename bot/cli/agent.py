"""``skald-telegram agent serve|pair|status|unpair``: the durable agent host and its tools."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "agent", help="run an agent host for scripts and coding agents, pair it, inspect it")
    commands = parser.add_subparsers(dest="agent_command", metavar="ACTION", required=True)

    serve = commands.add_parser("serve", help="run the agent host (a long-lived service)")
    _state_option(serve)
    serve.add_argument("--relay", help="relay URL, needed on first start and then remembered")
    serve.add_argument("--name", help="the name devices see (default: <user>@<hostname>)")
    serve.add_argument("--listen", metavar="HOST:PORT",
                       help="also serve the API over TCP, guarded by the token in DIR/api-token")
    serve.add_argument("--notifications", action="store_true",
                       help="also send a push-sized notification for every new item")
    serve.set_defaults(handler=run_serve)

    pair = commands.add_parser("pair", help="print a one-time pairing link and wait for a device")
    _state_option(pair)
    pair.add_argument("--wait", type=float, default=300.0, metavar="SECONDS",
                      help="how long to wait for a device to pair (default: 300)")
    pair.set_defaults(handler=run_pair)

    status = commands.add_parser("status", help="paired devices, open items, relay connection")
    _state_option(status)
    status.set_defaults(handler=run_status)

    unpair = commands.add_parser("unpair", help="forget a paired device")
    _state_option(unpair)
    unpair.add_argument("device", help="the device's id or name (see agent status)")
    unpair.set_defaults(handler=run_unpair)

    grants = commands.add_parser(
        "grants", help="the grants in force (id, label, granted by, expiry, uses); "
                       "'grants revoke ID' ends one")
    _state_option(grants)
    grants.add_argument("action", nargs="?", choices=["revoke"], help="revoke a grant")
    grants.add_argument("grant_id", nargs="?", metavar="ID", help="the grant to revoke")
    grants.set_defaults(handler=run_grants)


def _state_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state", metavar="DIR", type=Path,
        help="the host's state folder (default: $SKALD_AGENT_STATE or "
             "~/.local/state/skald-telegram/agent)")


def _state(args: argparse.Namespace) -> Path:
    from skald_telegram.client import default_state_dir

    return args.state if args.state is not None else default_state_dir()


def run_serve(args: argparse.Namespace) -> int:
    from bot.agenthost.serve import ServeOptions, serve

    return serve(ServeOptions(state=_state(args), relay=args.relay, name=args.name,
                              listen=args.listen, notifications=args.notifications))


def run_pair(args: argparse.Namespace) -> int:
    import segno

    from skald_telegram.client import AgentClient, ClientError

    try:
        with AgentClient(args.state) as client:
            pairing = client.new_pairing()
            print(pairing["link"], flush=True)
            segno.make(pairing["link"]).terminal(out=sys.stdout, compact=True)
            print("Send /pair <link> to your bot in Telegram, or run "
                  "'skald-telegram pair --chat ID <link>' beside a stopped bot.", flush=True)
            deadline = time.monotonic() + max(0.0, args.wait)
            while (left := deadline - time.monotonic()) > 0:
                found = client.pairing(pairing["pairing_id"], wait=left)
                if found["state"] == "paired":
                    print(f"paired with {found['device']['name']}", flush=True)
                    return 0
                if found["state"] == "expired":
                    break
    except ClientError as exc:
        print(f"skald-telegram: {exc}", file=sys.stderr)
        return 1
    if args.wait > 0:
        print("no device paired in time", file=sys.stderr)
        return 1
    return 0


def run_status(args: argparse.Namespace) -> int:
    from bot.integrations.waiting import ago
    from skald_telegram.client import AgentClient, ClientError

    try:
        with AgentClient(args.state) as client:
            status = client.status()
    except ClientError as exc:
        print(f"skald-telegram: {exc}", file=sys.stderr)
        return 1
    agent, relay = status["agent"], status["relay"]
    state = "connected" if relay["connected"] else f"not connected ({relay['last_error']})"
    print(f"agent {agent['name']} ({agent['id']})")
    print(f"relay {relay['url']}: {state}; outbox {status['outbox']}")
    store = status.get("store") or {"ok": True}
    print("store: ok" if store["ok"] else
          f"store: failing since {store['failing_since']} ({store['cause']})")
    print(f"paired devices: {len(status['devices'])}")
    now = datetime.now(UTC)
    for device in status["devices"]:
        when = device.get("last_seen")
        seen = f"last seen {when} ({ago(when, now)})" if when else "not seen since pairing"
        print(f"  {device['name']} ({device['id']}), paired {device['paired_at']}, {seen}")
    print(f"open items: {len(status['open_items'])}")
    for item in status["open_items"]:
        print(f"  {item['item_id']} {item['kind']}: {item['summary']} "
              f"(expires {item['expires_at']})")
    return 0


def run_unpair(args: argparse.Namespace) -> int:
    from skald_telegram.client import AgentClient, ClientError

    try:
        with AgentClient(args.state) as client:
            device = client.unpair(args.device)
    except ClientError as exc:
        print(f"skald-telegram: {exc}", file=sys.stderr)
        return 1
    print(f"unpaired {device['name']} ({device['id']})")
    return 0


def run_grants(args: argparse.Namespace) -> int:
    from skald_telegram.client import AgentClient, ClientError

    if (args.action == "revoke") != (args.grant_id is not None):
        print("skald-telegram: usage: skald-telegram agent grants [revoke ID]", file=sys.stderr)
        return 2
    try:
        with AgentClient(args.state) as client:
            if args.action == "revoke":
                grant = client.revoke_grant(args.grant_id)
                print(f"revoked {grant['grant_id']} ({grant['label']}); the paired devices "
                      "are told")
                return 0
            grants = client.grants()
    except ClientError as exc:
        print(f"skald-telegram: {exc}", file=sys.stderr)
        return 1
    if not grants:
        print("no grants in force")
    for grant in grants:
        print(f"{grant['grant_id']}  {grant['label']}  granted by {grant['granted_by']}  "
              f"until {grant['expires_at']}  {grant['uses']} use(s)")
    return 0
