"""A ``-v`` run logs neither the bot token nor a secret value, anywhere in its log."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from world import ADA, TOKEN, approval, make_world

from bot.logsafety import REDACTED, RedactingFilter, redact_value

SECRET = "sk-live-51H8xQ2eZvKYlo2C"


async def test_a_verbose_run_logs_no_token_and_no_secret(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        config = tmp_path / "skald-telegram.toml"
        config.write_text(
            f'[telegram]\napi_url = "{world.tg.api_url}"\nadmins = [{ADA}]\n'
            f'chat_pace_seconds = 0\n[state]\ndir = "{tmp_path / "state"}"\n'
        )
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        env = {**os.environ, "TELEGRAM_BOT_TOKEN_FILE": str(token_file)}
        env.pop("TELEGRAM_BOT_TOKEN", None)
        log_path = tmp_path / "bot.log"
        with log_path.open("wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "-v", "run", "--config", str(config),
                env=env, cwd=tmp_path, stdout=log_file, stderr=log_file,
            )
            try:
                await world.pair(ADA)
                world.agent.submit_approval(approval("apr_secret", blocks={"v": 1, "blocks": [
                    {"type": "key_value", "key": "API key", "value": SECRET,
                     "value_type": "secret"},
                ]}, arguments={"api_key": SECRET}))
                card = await world.wait_card(ADA, "apr_secret", timeout=20)
                assert SECRET in card.html  # a private chat: behind a spoiler
                world.tap(ADA, card, ADA, "Approve")
                await world.agent.wait_for(lambda a: len(a.decisions) == 1, timeout=20)
            finally:
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.wait(), 20)
        log = log_path.read_text(errors="replace")
        assert " DEBUG " in log  # the run was verbose
        assert TOKEN not in log
        assert TOKEN.split(":", 1)[1] not in log
        assert SECRET not in log


def test_the_filter_redacts_messages_arguments_and_tracebacks() -> None:
    token = "987654321:AAH-a-token-we-never-saw-before_xyz"
    redact_value("111:registered")
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "url %s and %s",
                               (f"/bot{token}/getMe", "111:registered"), None)
    try:
        raise ValueError(f"bad {token}")
    except ValueError:
        record.exc_info = sys.exc_info()
    assert RedactingFilter().filter(record)
    text = logging.Formatter().format(record)
    assert token not in text and "111:registered" not in text
    assert text.count(REDACTED) == 3
