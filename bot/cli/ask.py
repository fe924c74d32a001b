"""``skald-telegram ask``: ask for an approval (or an answer) and wait for it, for scripts.

Exit codes: 0 approved (or answered), 1 denied, 2 no decision in time (the item is
withdrawn), 3 anything else (``--require-device`` with no device picking the request up
among them), argparse's own usage errors included (its usual 2 would read as a timeout).
The subcommand therefore takes its words unparsed and reads them with its own parser.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from bot.integrations.waiting import Watch

if TYPE_CHECKING:
    from skald_telegram.client import AgentClient, Outcome

EXIT_APPROVED = 0
EXIT_DENIED = 1
EXIT_TIMEOUT = 2
EXIT_OTHER = 3
_EXIT_CODES = {"approved": EXIT_APPROVED, "answered": EXIT_APPROVED, "denied": EXIT_DENIED,
               "expired": EXIT_TIMEOUT, "withdrawn": EXIT_TIMEOUT, "pending": EXIT_TIMEOUT}


class UsageError(Exception):
    """A bad command line: exit 3 with one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "ask", help="ask for an approval or an answer and wait for it (exit 0/1/2/3)",
        add_help=False, prefix_chars="\0")
    parser.add_argument("words", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(handler=run)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="skald-telegram ask",
        description="Submit an approval (--tool) or a question (--question) to the agent "
                    "host and wait for the decision. Exit 0: approved or answered; 1: denied; "
                    "2: no decision within --timeout (withdrawn); 3: anything else.")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--tool", metavar="NAME", help="the tool call to approve")
    what.add_argument("--question", metavar="TEXT", help="ask a question instead")
    what.add_argument("--item", metavar="ID", help="wait on an item submitted earlier")
    parser.add_argument("--summary", metavar="TEXT",
                        help="one line for the card (default: <tool>(<first argument>))")
    parser.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                        help="one argument of the call (repeatable)")
    parser.add_argument("--args-json", metavar="JSON|@FILE|-",
                        help="the arguments as one JSON object (- reads standard input)")
    parser.add_argument("--blocks-json", metavar="JSON|@FILE",
                        help="seed blocks describing the call (default: described from the "
                             "arguments)")
    parser.add_argument("--option", action="append", default=[], metavar="LABEL",
                        help="an answer to offer for --question (repeatable)")
    parser.add_argument("--grant-key", metavar="KEY",
                        help="offer a grant: the approver may also approve, for a while, "
                             "later asks with the same key (they are approved at once); the "
                             "card shows it as offered by a script, with its key, and it "
                             "never covers a hook's or the gateway's calls")
    parser.add_argument("--grant-label", metavar="TEXT",
                        help="what the approver is shown the grant covers")
    parser.add_argument("--editable", action="append", default=[], metavar="KEY",
                        help="let the approver change this argument before approving "
                             "(repeatable); the script must then run the arguments that "
                             "come back (--json: \"arguments\", with \"edited\": true)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="how long to wait for a decision (default: 600)")
    parser.add_argument("--require-device", action="store_true",
                        help="exit 3 (withdrawing the request) when no paired device has "
                             "picked it up within 15 s, instead of saying so and waiting on")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--state", metavar="DIR", type=Path,
                        help="the agent host's state folder")
    return parser


def run(args: argparse.Namespace) -> int:
    from skald_telegram.client import AgentClient, ClientError

    try:
        options = build_parser().parse_args(args.words)
        request = _request(options)
    except UsageError as exc:
        print(f"skald-telegram ask: {exc}", file=sys.stderr)
        return EXIT_OTHER
    try:
        with AgentClient(options.state) as client:
            outcome = _ask(client, options, request)
    except ClientError as exc:
        print(f"skald-telegram ask: {exc}", file=sys.stderr)
        return EXIT_OTHER
    if outcome is None:
        return EXIT_OTHER
    _report(outcome, options)
    return _EXIT_CODES.get(outcome.state, EXIT_OTHER)


def _request(options: argparse.Namespace) -> dict[str, Any]:
    """What to submit, checked before anything is sent."""
    if options.timeout is not None and not 0 < options.timeout <= 7 * 24 * 3600:
        raise UsageError("--timeout must be more than 0 and at most 604800 seconds")
    if options.item:
        return {}
    if options.question:
        if (options.arg or options.args_json or options.blocks_json or options.summary
                or options.editable):
            raise UsageError("--question takes --option, not arguments, blocks or a summary")
        return {"question": options.question, "options": options.option}
    if not options.tool:
        raise UsageError("say what to ask: --tool NAME, --question TEXT or --item ID")
    if options.option:
        raise UsageError("--option goes with --question")
    if options.grant_label and not options.grant_key:
        raise UsageError("--grant-label goes with --grant-key")
    arguments: dict[str, Any] = {}
    if options.args_json:
        loaded = _json_argument(options.args_json, "--args-json", stdin=True)
        if not isinstance(loaded, dict):
            raise UsageError("--args-json must be a JSON object")
        arguments.update(loaded)
    for pair in options.arg:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise UsageError(f"--arg wants KEY=VALUE, got {pair!r}")
        arguments[key] = value
    missing = [key for key in options.editable if key not in arguments]
    if missing:
        raise UsageError(f"--editable {missing[0]} names no argument of the call")
    blocks = None
    if options.blocks_json:
        blocks = _json_argument(options.blocks_json, "--blocks-json", stdin=False)
        if not isinstance(blocks, list | dict):
            raise UsageError("--blocks-json must be a JSON list of blocks (or an object with "
                             "'blocks')")
    return {"tool": options.tool, "summary": options.summary, "arguments": arguments,
            "blocks": blocks, "grant_key": options.grant_key,
            "grant_label": options.grant_label, "editable": options.editable}


def _json_argument(text: str, flag: str, *, stdin: bool) -> Any:
    if text == "-" and stdin:
        text = sys.stdin.read()
    elif text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{flag}: cannot read {text[1:]}: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{flag} is not valid JSON: {exc}") from exc


def _ask(client: AgentClient, options: argparse.Namespace,
         request: dict[str, Any]) -> Outcome | None:
    from skald_telegram.client import DEFAULT_TIMEOUT_S, EXPIRY_GRACE_S, ClientError, Outcome

    timeout = options.timeout if options.timeout is not None else DEFAULT_TIMEOUT_S
    item_id = options.item
    watch = Watch(sys.stderr, "skald-telegram ask", stop_when_unseen=options.require_device)
    try:
        if item_id is None:
            if "question" in request:
                item_id = client.submit_question(request["question"], request["options"],
                                                 timeout)
            else:
                item_id = client.submit_approval(
                    request["tool"], summary=request["summary"],
                    arguments=request["arguments"], blocks=request["blocks"], timeout=timeout,
                    grant_key=request["grant_key"], grant_label=request["grant_label"],
                    editable=request["editable"])
            wait: float | None = timeout + EXPIRY_GRACE_S
        else:
            wait = options.timeout
        _announce(client, watch, item_id, request)
        # Just submitted: the host ran, so one that goes away now is waited for.
        submitted = None if options.item else Outcome(item_id, "pending")
        outcome = _watched_wait(client, watch, item_id, wait, submitted)
        if outcome.pending and watch.told and watch.stop_when_unseen:
            client.withdraw(item_id)
            print(f"skald-telegram ask: {item_id} withdrawn: no device picked it up "
                  "(--require-device)", file=sys.stderr)
            return None
        return client.withdraw(item_id) if outcome.pending else outcome
    except KeyboardInterrupt:
        if item_id is not None:
            try:
                client.withdraw(item_id)
            except ClientError as exc:
                print(f"skald-telegram ask: could not withdraw {item_id}: {exc}",
                      file=sys.stderr)
                return None
            print(f"skald-telegram ask: interrupted; {item_id} withdrawn", file=sys.stderr)
        return None


def _announce(client: AgentClient, watch: Watch, item_id: str,
              request: dict[str, Any]) -> None:
    """The waiting line, with the summary the card shows (the host's when none was given)."""
    summary = request.get("question") or request.get("summary")
    if summary is None and sys.stderr.isatty():
        listed = [i for i in client.items() if i.get("item_id") == item_id]
        summary = listed[0].get("summary") if listed else request.get("tool", item_id)
    watch.waiting(item_id, str(summary), question=item_id.startswith("clr_"))


def _watched_wait(client: AgentClient, watch: Watch, item_id: str,
                  timeout: float | None, submitted: Outcome | None) -> Outcome:
    """Wait as :meth:`AgentClient.wait` does; once the notice's time has passed with no
    device holding the request, say so and which devices there are (and, for
    ``--require-device``, stop waiting)."""
    from skald_telegram.client import HostUnavailable

    started = time.monotonic()
    first = watch.first_wait(timeout if timeout is not None else float("inf"))
    outcome = client.wait(item_id, first, since=submitted)
    if watch.unseen(outcome):
        try:
            devices = client.status()["devices"]
        except HostUnavailable:  # restarting: it may well have been picked up; wait on
            pass
        else:
            watch.not_picked_up(devices)
            if watch.stop_when_unseen:
                return outcome
    if not outcome.pending:
        return outcome
    left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
    return client.wait(item_id, left, since=outcome)


def _who(decided_by: Any) -> str:
    if not isinstance(decided_by, dict) or not decided_by.get("name"):
        return "someone"
    username = decided_by.get("username")
    return f"{decided_by['name']} (@{username})" if username else str(decided_by["name"])


def _report(outcome: Outcome, options: argparse.Namespace) -> None:
    if options.json:
        report: dict[str, Any] = {
            "decision": outcome.state,
            "reason": outcome.reason,
            "decided_by": None if outcome.decided_by is None else dict(outcome.decided_by),
            "item_id": outcome.item_id,
        }
        if outcome.answer is not None:
            report["answer"] = outcome.answer
        if outcome.edited:
            report["edited"] = True
            report["arguments"] = dict(outcome.arguments or {})
        print(json.dumps(report, ensure_ascii=False))
        return
    if outcome.edited:
        print(f"approved with an edit by {_who(outcome.decided_by)}")
        print(json.dumps(dict(outcome.arguments or {}), ensure_ascii=False))
    elif outcome.state == "answered":
        print(outcome.answer)
    elif outcome.state == "approved" and outcome.reason:
        print(outcome.reason)  # e.g. approved by Ada's grant (…, 12 min left)
    elif outcome.state in ("approved", "denied"):
        line = f"{outcome.state} by {_who(outcome.decided_by)}"
        print(f"{line}: {outcome.reason}" if outcome.reason else line)
    else:
        print(f"no decision in time: {outcome.item_id} {outcome.state}")
