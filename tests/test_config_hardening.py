"""Configuration mistakes that would weaken oversight are refused with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import parse_config
from bot.errors import ConfigError


@pytest.mark.parametrize("service_id", [1087968824, 777000, 136817688])
def test_a_service_id_is_not_an_admin_or_an_approver(tmp_path: Path, service_id: int) -> None:
    with pytest.raises(ConfigError, match=rf"telegram\.admins: {service_id} is a Telegram "
                                          "service id"):
        parse_config({"telegram": {"admins": [4242, service_id]}}, base=tmp_path)
    with pytest.raises(ConfigError, match=rf"chats\[0\]\.approvers: {service_id}"):
        parse_config({"chats": [{"id": -100, "approvers": [service_id]}]}, base=tmp_path)
