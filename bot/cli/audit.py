"""``skald-telegram audit``: export the audit trail as JSON lines or CSV."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot.cli import add_config_option

if TYPE_CHECKING:
    from bot.core.model import AuditRow

AUDIT_FIELDS = ("seq", "at", "event", "chat_id", "agent_id", "item_id", "user_id", "user_name",
                "detail")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("audit", help="export the audit trail")
    add_config_option(parser)
    parser.add_argument("--chat", type=int, help="only this chat")
    parser.add_argument("--since", help="only records at or after this ISO 8601 time")
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl",
                        help="one JSON object a line (default) or CSV with a header row")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot.config import load_config
    from bot.statedir import ensure_state_dir
    from bot.store import Store

    config = load_config(args.config, require_token=False)
    since = _since_ms(args.since) if args.since else None
    ensure_state_dir(config.state_dir, create=False)
    if config.storage_url is None and not config.database_path.is_file():
        print(f"skald-telegram: no database at {config.database_path} (check state.dir, "
              "or --config)", file=sys.stderr)
        return 1
    store = Store.open(config.database)
    try:
        rows = store.audit.rows(chat_id=args.chat, since_ms=since)
    finally:
        store.close()
    sys.stdout.write(format_audit(rows, args.format))
    return 0


def _since_ms(text: str) -> int:
    from bot.clock import to_ms
    from bot.errors import ConfigError
    from bot.protocol.encoding import parse_rfc3339

    moment = parse_rfc3339(text)
    if moment is None:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError as exc:
            raise ConfigError(f"--since: not an ISO 8601 date or time: {text!r}") from exc
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    return to_ms(moment)


def audit_record(row: AuditRow) -> dict[str, object]:
    from bot.clock import from_ms
    from bot.protocol.encoding import format_rfc3339

    return {
        "seq": row.seq,
        "at": format_rfc3339(from_ms(row.at)),
        "event": row.event,
        "chat_id": row.chat_id,
        "agent_id": row.agent_id,
        "item_id": row.item_id,
        "user_id": row.user_id,
        "user_name": row.user_name,
        "detail": row.detail,
    }


def format_audit(rows: Iterable[AuditRow], fmt: str) -> str:
    """The audit trail as JSON lines or CSV (``detail`` as a JSON column)."""
    records = [audit_record(row) for row in rows]
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=AUDIT_FIELDS, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({**record, "detail": json.dumps(record["detail"], ensure_ascii=False)})
    return out.getvalue()
