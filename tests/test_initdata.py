"""``initData`` checked as Telegram documents it: the hash computed here by hand from the
documented steps, forged, stale, foreign and malformed data refused."""

from __future__ import annotations

import hashlib
import hmac
import json
from urllib.parse import quote

import pytest

from bot.errors import InitDataError
from bot.tg.initdata import check_init_data, sign_init_data

TOKEN = "123456:TEST-token"
NOW = 1_780_000_000
USER = json.dumps({"id": 4242, "first_name": "Ada", "username": "ada"}, separators=(",", ":"))


def documented(fields: dict[str, str], token: str) -> str:
    """Telegram's steps, written out: the data-check-string, then the two HMACs."""
    check = "\n".join(f"{k}={v}" for k, v in sorted(fields.items()))
    secret = hmac.new(key=b"WebAppData", msg=token.encode(), digestmod=hashlib.sha256).digest()
    digest = hmac.new(key=secret, msg=check.encode(), digestmod=hashlib.sha256).hexdigest()
    return "&".join(f"{k}={quote(v, safe='')}" for k, v in fields.items()) + f"&hash={digest}"


def fields(**extra: str) -> dict[str, str]:
    return {"query_id": "AAHdF6IQAAAAAN0XohDhrOrc", "user": USER,
            "auth_date": str(NOW - 60), **extra}


def test_documented_data_is_accepted_and_names_its_user() -> None:
    data = check_init_data(documented(fields(start_param="ref_1"), TOKEN), TOKEN, NOW)
    assert (data.user_id, data.first_name, data.start_param) == (4242, "Ada", "ref_1")
    assert data.auth_date == NOW - 60


def test_the_signer_signs_as_documented() -> None:
    signed = sign_init_data(fields(), TOKEN)
    assert signed.rsplit("hash=", 1)[1] == documented(fields(), TOKEN).rsplit("hash=", 1)[1]
    assert check_init_data(signed, TOKEN, NOW).user_id == 4242


@pytest.mark.parametrize(("raw", "error"), [
    (documented(fields(), "654321:OTHER-bot"), "not signed for this bot"),
    (documented(fields(), TOKEN).replace("4242", "4343"), "not signed for this bot"),
    (documented(fields(), TOKEN).rsplit("&hash=", 1)[0], "not signed for this bot"),
    (documented(fields(), TOKEN) + "&hash=00", "repeats a field"),
    (documented(fields(auth_date=str(NOW - 3601)), TOKEN), "older than an hour"),
    (documented(fields(auth_date=str(NOW + 3600)), TOKEN), "dated in the future"),
    (documented(fields(auth_date="soon"), TOKEN), "no auth_date"),
    (documented(fields(user='{"id": "4242"}'), TOKEN), "no user"),
    (documented(fields(user="[]"), TOKEN), "no user"),
    (documented({"auth_date": str(NOW)}, TOKEN), "no user"),
    ("", "not signed for this bot"),
    ("user", "not a query string"),
    ("x" * 9000, "too long"),
])
def test_forged_stale_foreign_or_malformed_data_is_refused(raw: str, error: str) -> None:
    with pytest.raises(InitDataError, match=error):
        check_init_data(raw, TOKEN, NOW)


def test_an_hour_old_is_still_fresh() -> None:
    raw = documented(fields(auth_date=str(NOW - 3600)), TOKEN)
    assert check_init_data(raw, TOKEN, NOW).user_id == 4242
