"""The demo agent: what it asks for, how it reports, and ``skald-telegram demo-agent``.

Once paired, the demo agent asks for a realistic set of approvals (two of them editable
before approving) and a question (:data:`DEMO_ITEMS`) and prints every decision and answer
it receives, with who made it.
``demo`` (:mod:`bot.demo`) and the playground (:mod:`bot.playground.session`) run it beside
the bot; ``demo-agent`` runs it alone against a relay, for trying a bot that runs elsewhere:
it prints a pairing link (and its QR code) and waits for a device to pair.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TextIO

import segno

from bot.app import Running
from bot.bridge import PAIRING_TIMEOUT_S
from bot.errors import ConfigError, SkaldError
from bot.keyfile import load_or_create_identity
from bot.protocol.encoding import format_rfc3339
from bot.protocol.identity import Identity
from bot.protocol.pairing import parse_pairing_uri
from bot.protocol.payloads import ApprovalDecision, ClarificationAnswer, Person
from bot.render import Renderer
from bot.signals import run_until_stopped
from bot.testing.agent import Agent
from bot.tg.gateway import Gateway

log = logging.getLogger(__name__)

AGENT_NAME: Final = "Skald demo agent"
EXPIRES_AFTER: Final = timedelta(minutes=15)
_WAIT_CHUNK_S: Final = 60.0

_COMMAND: Final = """\
set -euo pipefail
cd /srv/billing
sudo systemctl stop 'billing-worker@*'
find /var/log/billing -name '*.log.*' -mtime +14 -print -delete
tar czf "/backups/billing-logs-$(date +%F).tar.gz" /var/log/billing/*.log.1
sudo -u billing ./venv/bin/python manage.py migrate --noinput
sudo systemctl start 'billing-worker@'{1..4}
systemctl --no-pager status 'billing-worker@*' | head -n 40"""

_DIFF: Final = """\
@@ -3,9 +3,10 @@ service: billing-api
 image: registry.acme.com/billing-api:2.13.2
 replicas:
-  min: 2
-  max: 4
+  min: 3
+  max: 8
+  target_cpu_percent: 65
 healthcheck:
   path: /healthz
-  timeout_seconds: 2
+  timeout_seconds: 5"""

_EMAIL_BODY: Final = """\
Hi Mario,

here is the estimate for Q3: 42 engineering days, delivered in three milestones \
(July 15, August 30, September 26). The total is €38,400, VAT excluded.

Let me know if you want to go through it on a call this week.

Ada"""

DEMO_ITEMS: Final[tuple[dict[str, Any], ...]] = (
    {
        "kind": "approval",
        "id": "apr_email",
        "tool": "send_email",
        "summary": "Send the Q3 estimate to mario@acme.com",
        "blocks": {"v": 1, "blocks": [
            {"type": "key_value", "key": "To", "value": "mario@acme.com", "value_type": "email"},
            {"type": "field", "label": "Subject", "value": "Q3 estimate", "value_type": "string"},
            {"type": "block", "label": "Body", "value": _EMAIL_BODY, "value_type": "text"},
        ]},
        "arguments": {"to": "mario@acme.com", "subject": "Q3 estimate", "body": _EMAIL_BODY},
        "editable": ["subject", "body"],
    },
    {
        "kind": "approval",
        "id": "apr_write",
        "tool": "write_file",
        "summary": "Write deploy/billing-api.yaml",
        "blocks": {"v": 1, "blocks": [
            {"type": "key_value", "key": "File", "value": "deploy/billing-api.yaml",
             "value_type": "path"},
            {"type": "block", "label": "Diff", "value": _DIFF, "value_type": "diff"},
        ]},
        "arguments": {"path": "deploy/billing-api.yaml", "diff": _DIFF},
    },
    {
        "kind": "approval",
        "id": "apr_deploy",
        "tool": "deploy",
        "summary": "Deploy billing-api 2.14.0 to production",
        "blocks": {"v": 1, "blocks": [
            {"type": "field", "label": "Service", "value": "billing-api", "value_type": "string"},
            {"type": "field", "label": "Version", "value": "2.14.0", "value_type": "string"},
            {"type": "key_value", "key": "Environment", "value": "production",
             "value_type": "string"},
            {"type": "key_value", "key": "API key", "value": "sk_live_demo_51Hq7c2e9Fa04b3d",
             "value_type": "secret"},
        ]},
        "arguments": {"service": "billing-api", "version": "2.14.0",
                      "environment": "production", "strategy": "rolling",
                      "api_key": "sk_live_demo_51Hq7c2e9Fa04b3d"},
    },
    {
        "kind": "approval",
        "id": "apr_shell",
        "tool": "run_shell",
        "summary": "Rotate the logs, migrate and restart the billing workers on web-1",
        "blocks": {"v": 1, "blocks": [
            {"type": "key_value", "key": "Host", "value": "web-1.internal",
             "value_type": "string"},
            {"type": "block", "label": "Command", "value": _COMMAND, "value_type": "command"},
        ]},
        "arguments": {"host": "web-1.internal", "command": _COMMAND},
        "editable": ["command"],
    },
    {
        "kind": "clarification",
        "id": "clr_target",
        "question": "Where should billing-api 2.14.0 go first?",
        "options": ["staging", "canary (5% of traffic)", "production"],
    },
)
"""What the demo agent asks for, as wire items without ids' suffixes and timestamps."""


def demo_items(run_id: str, now: datetime) -> list[tuple[str, dict[str, Any]]]:
    """:data:`DEMO_ITEMS` as wire dicts (kind, item): ids made unique with ``run_id``,
    created now and expiring :data:`EXPIRES_AFTER` later."""
    items = []
    for template in DEMO_ITEMS:
        item = copy.deepcopy(template)
        kind = item.pop("kind")
        item["id"] = f"{item['id']}_{run_id}"
        item["created_at"] = format_rfc3339(now)
        item["expires_at"] = format_rfc3339(now + EXPIRES_AFTER)
        items.append((kind, item))
    return items


def who(person: Person) -> str:
    """``Ada Lovelace (@ada)``, or the name alone."""
    name = printable(person.name)
    return f"{name} (@{printable(person.username)})" if person.username else name


def printable(text: str) -> str:
    """``text`` without control characters: what people type in Telegram must not be able
    to drive the terminal (escape sequences)."""
    return "".join(c if c.isprintable() else " " for c in text)


class DemoAgent:
    """An :class:`Agent` that asks the demo set once paired and reports what comes back."""

    def __init__(self, agent: Agent, out: TextIO) -> None:
        self.agent = agent
        self._out = out
        self._titles: dict[str, str] = {}
        self._reported = (0, 0)

    def say(self, line: str) -> None:
        print(line, file=self._out, flush=True)

    def submit(self, now: datetime, where: str = "Telegram") -> None:
        """Ask for every item of the demo set."""
        for kind, item in demo_items(secrets.token_hex(3), now):
            if kind == "approval":
                self._titles[item["id"]] = str(item["tool"])
                self.agent.submit_approval(item)
            else:
                self._titles[item["id"]] = str(item["question"])
                self.agent.submit_clarification(item)
        self.say(f"📨 Asked for {len(self._titles)} things; tap on them in {where}.")

    async def serve(self, stop: asyncio.Event, paired: Callable[[], bool]) -> None:
        """Wait until ``paired()``, ask the demo set, then report until ``stop`` is set."""
        if not await self.until(paired, stop):
            return
        self.submit(datetime.now(UTC))
        await self.report(stop)

    async def report(self, stop: asyncio.Event) -> None:
        """Print every decision and answer the agent receives until ``stop`` is set."""
        while await self.until(self._news, stop):
            self._report()

    def _news(self) -> bool:
        return (len(self.agent.decisions), len(self.agent.answers)) != self._reported

    def _report(self) -> None:
        done_decisions, done_answers = self._reported
        for decision in self.agent.decisions[done_decisions:]:
            self.say(self._decision_line(decision))
        for answer in self.agent.answers[done_answers:]:
            self.say(self._answer_line(answer))
        self._reported = (len(self.agent.decisions), len(self.agent.answers))
        if sum(self._reported) >= len(self._titles):
            self.say("🎉 Every request has been handled. Ctrl-C stops the demo.")

    def _decision_line(self, decision: ApprovalDecision) -> str:
        tool = self._titles.get(decision.approval_id, decision.approval_id)
        if decision.decision == "approve":
            edited = " with an edit" if decision.arguments is not None else ""
            return f"✅ approved {tool}{edited} by {who(decision.decided_by)}"
        reason = f": {printable(decision.reason)}" if decision.reason else ""
        return f"❌ denied {tool} by {who(decision.decided_by)}{reason}"

    def _answer_line(self, answer: ClarificationAnswer) -> str:
        question = self._titles.get(answer.clarification_id, answer.clarification_id)
        said = printable(answer.answer)
        return f"💬 answered “{question}” with “{said}” by {who(answer.answered_by)}"

    async def until(self, condition: Callable[[], bool], stop: asyncio.Event) -> bool:
        """Wait until ``condition()`` holds (``True``) or ``stop`` is set (``False``)."""
        while not condition():
            if stop.is_set():
                return False
            waiter = asyncio.ensure_future(
                self.agent.wait_for(lambda _agent: condition(), timeout=_WAIT_CHUNK_S)
            )
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            for task in (waiter, stopper):
                task.cancel()
            await asyncio.gather(waiter, stopper, return_exceptions=True)
        return True


async def pair_chat(running: Running, agent: Agent, chat_id: int, person: Person,
                    renderer: Renderer) -> bool:
    """Pair the demo agent with the bot, bound to ``chat_id`` as asked by ``person``, and
    say so in the chat; False if the agent did not accept in time."""
    uri = parse_pairing_uri(agent.new_pairing_uri())
    running.act_on(running.bridge.start_pairing(uri, chat_id=chat_id, topic_id=None,
                                                requested_by=person.telegram_user_id))
    try:
        await running.wait_until_paired(uri.agent.id, timeout=PAIRING_TIMEOUT_S)
    except TimeoutError:
        return False
    html = renderer.message("demo_paired", agent=agent.identity.name)
    try:
        await Gateway(running.application.bot).send(chat_id, html)
    except SkaldError as exc:
        log.warning("could not announce the pairing in chat %s: %s", chat_id, exc)
    return True


def quiet_logs(verbose: bool) -> None:
    """Keep the terminal for the demo's own lines: only warnings, unless ``-v``."""
    if not verbose:
        logging.getLogger().setLevel(logging.WARNING)


# -- demo-agent ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoAgentOptions:
    """What ``skald-telegram demo-agent`` runs with."""

    relay: str
    name: str = AGENT_NAME
    state: Path | None = None
    """Where to keep the agent's identity; a fresh identity each run if unset."""


async def run_demo_agent(options: DemoAgentOptions, *, stop: asyncio.Event, out: TextIO) -> int:
    """Print a pairing link and its QR code, wait for a device, ask the demo set and report
    until ``stop`` is set; the exit code."""
    if not options.relay.startswith(("ws://", "wss://")):
        raise ConfigError(f"--relay: must be a ws:// or wss:// URL, got {options.relay!r}")
    if options.state is None:
        identity = Identity.generate(options.name)
    else:
        identity = load_or_create_identity(options.state / "demo-agent.json", options.name)
    agent = Agent(identity, options.relay)
    demo = DemoAgent(agent, out)
    await agent.start()
    try:
        uri = agent.new_pairing_uri()
        demo.say(f"{identity.name} ({identity.id[:8]}) on {options.relay}")
        demo.say("Pairing link (one use):")
        demo.say(uri)
        segno.make(uri).terminal(out=out, compact=True)
        demo.say("Pair it from the bot's chat: a bot administrator sends /pair followed by the "
                 "link,\nor on the bot's host: skald-telegram pair --chat CHAT_ID '<link>'")
        demo.say("Waiting for a device to pair… (Ctrl-C stops)")
        if await demo.until(lambda: bool(agent.peers), stop):
            for card in agent.peers.values():
                demo.say(f"🔗 Paired with {card.name} ({card.id[:8]}).")
            await demo.serve(stop, lambda: True)
        demo.say("Stopping the demo agent…")
    finally:
        await agent.stop()
    return 0


def demo_agent_command(args: argparse.Namespace) -> int:
    """``skald-telegram demo-agent``."""
    quiet_logs(args.verbose)
    options = DemoAgentOptions(
        relay=args.relay,
        name=args.name or AGENT_NAME,
        state=Path(args.state) if args.state else None,
    )
    return asyncio.run(
        run_until_stopped(lambda stop: run_demo_agent(options, stop=stop, out=sys.stdout))
    )
