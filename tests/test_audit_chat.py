"""``audit --chat ID`` holds every record about the items shown in that chat, including
their expiry and their resolution elsewhere (stored without a chat of their own)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from datetime import timedelta
from pathlib import Path

from world import ADA, BOB, approval, iso, make_world, running_bot

from bot.cli import main as cli_main


def audit(config: Path, chat: int) -> list[dict[str, object]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["audit", "--config", str(config), "--chat", str(chat)]) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


async def test_audit_of_a_chat_includes_expiry_and_resolution_elsewhere(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        async with running_bot(world):
            await world.pair(ADA)
            world.agent.submit_approval(approval("apr_else"))
            world.agent.submit_approval(approval("apr_soon",
                                                  expires_at=iso(timedelta(seconds=1))))
            await world.wait_card(ADA, "apr_else")
            world.agent.resolve("apr_else", "approved", by="iPhone of Ada")
            await world.wait_card(ADA, "apr_else", lambda m: "iPhone of Ada" in m.text)
            await world.wait_card(ADA, "apr_soon", lambda m: "Expired" in m.text, timeout=15)
        config = tmp_path / "audit.toml"
        config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n')
        records = await asyncio.to_thread(audit, config, ADA)
        events = {(r["event"], r["item_id"]) for r in records}
        assert ("resolved_elsewhere", "apr_else") in events
        assert ("expired", "apr_soon") in events
        others = await asyncio.to_thread(audit, config, BOB)
        assert not any(r["item_id"] in ("apr_else", "apr_soon") for r in others)
