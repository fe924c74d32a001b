"""The ``timezone`` setting: IANA names, global and per chat; every time a chat sees is in
its zone and says which zone it is; ``/status`` shows no raw revision number."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from world import ADA, OPS_GROUP, approval, iso, make_world, running_bot

from bot.config import parse_config
from bot.errors import ConfigError
from bot.protocol.payloads import Approval
from bot.render import Renderer


def test_timezone_is_global_and_per_chat_and_checked(tmp_path: Path) -> None:
    config = parse_config({"telegram": {"timezone": "Europe/Berlin"},
                           "chats": [{"id": OPS_GROUP, "timezone": "Asia/Tokyo"}]},
                          base=tmp_path)
    assert config.policy(ADA, private=True).timezone == "Europe/Berlin"
    assert config.policy(OPS_GROUP, private=False).timezone == "Asia/Tokyo"
    assert parse_config({}, base=tmp_path).policy(ADA, private=True).timezone == "UTC"
    for data, key in [({"telegram": {"timezone": "Mars/Olympus"}}, r"telegram\.timezone"),
                      ({"telegram": {"timezone": 1}}, r"telegram\.timezone"),
                      ({"chats": [{"id": 1, "timezone": "CEST+2"}]}, r"chats\[0\]\.timezone")]:
        with pytest.raises(ConfigError, match=key):
            parse_config(data, base=tmp_path)


def test_a_card_shows_its_expiry_in_the_chats_zone() -> None:
    item = Approval(id="apr_z", tool="deploy", summary="Deploy", blocks=(), arguments={},
                    expires_at=datetime(2025, 11, 29, 10, 15, tzinfo=UTC))
    now = datetime(2025, 11, 29, 10, 1, tzinfo=UTC)
    renderer = Renderer()
    utc = renderer.approval_card(item, agent_name="a", secrets="masked", now=now)
    berlin = renderer.approval_card(item, agent_name="a", secrets="masked", now=now,
                                    zone="Europe/Berlin")
    assert "expires 10:15 UTC, in 14 min" in utc.plain
    assert "expires 11:15 CET, in 14 min" in berlin.plain


async def test_status_shows_the_zone_and_no_raw_revision(tmp_path: Path) -> None:
    async with make_world(tmp_path, timezone="Asia/Tokyo") as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_tz", expires_at=iso()))
        await world.wait_card(ADA, "apr_tz")
        world.tg.send_text(ADA, ADA, "/status")
        await world.tg.wait_for(lambda tg: any("Status" in m.text for m in tg.bot_messages(ADA)))
        status = next(m.text for m in world.tg.bot_messages(ADA) if "Status" in m.text)
        assert "times in Asia/Tokyo" in status
        assert "last update" in status and "JST" in status
        assert "rev" not in status and str(world.agent.rev) not in status
        assert "UTC" not in status
