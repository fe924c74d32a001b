"""A relay whose queue file has damaged table pages refuses to start, in one line, instead
of starting and then refusing every frame; the check at start is bounded in time."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bot.errors import StoreError
from bot.relay.limits import QueueLimits
from bot.relay.queue import DB_NAME, Batch, Incoming, RelayQueue

ROOT = Path(__file__).resolve().parent.parent
ROOMY = QueueLimits(*([10**12] * 11))
"""No limit in the way of filling a queue."""


def filled_queue(data: Path, envelopes: int) -> Path:
    """A closed queue in ``data`` holding ``envelopes`` envelopes of about 1 KiB."""
    queue = RelayQueue.open(data, limits=ROOMY)
    puts = [Incoming(f"r{i % 7}", f"s{i % 5}", f"e{i}", "x" * 1000, address=f"a{i}")
            for i in range(envelopes)]
    queue.apply(Batch(connected=[f"r{i}" for i in range(7)], puts=puts), 1)
    queue.close()  # the last connection closing copies the log into the file
    return data / DB_NAME


def damage_pages(path: Path, name: str = "queue") -> None:
    """Write garbage over the root page of the table or index ``name`` and over the page
    after it, as a failing disk or a stray write would."""
    with sqlite3.connect(path) as db:
        (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                             (name,)).fetchone()
        (page,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    with path.open("r+b") as file:
        for number in (root, root + 1):
            file.seek((number - 1) * page + 8)
            file.write(os.urandom(page - 8))


@pytest.mark.parametrize("name", ["queue", "queue_by_envelope"])
def test_a_relay_on_a_damaged_queue_refuses_to_start_in_one_line(
    tmp_path: Path, name: str
) -> None:
    # Without the check, damaged index pages let the relay start and then refuse every
    # envelope sent to it.
    data = tmp_path / "relay"
    damage_pages(filled_queue(data, 500), name)
    result = subprocess.run(
        [sys.executable, "-m", "bot", "relay", "--port", "0", "--data", str(data)],
        cwd=tmp_path, capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"the relay queue {data / DB_NAME} is damaged (" in lines[0]
    assert "restore it from a backup, or move it away" in lines[0]


def test_a_sound_queue_opens_with_everything_in_it(tmp_path: Path) -> None:
    filled_queue(tmp_path, 500)
    queue = RelayQueue.open(tmp_path, limits=ROOMY)
    try:
        assert len(queue.pending("r0", limit=1000, max_bytes=10**9)) == 72
    finally:
        queue.close()


def test_a_queue_too_large_to_check_in_time_is_checked_in_part_and_opens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = filled_queue(tmp_path, 5000)
    with caplog.at_level(logging.WARNING, logger="bot.relay.queue"):
        RelayQueue.open(tmp_path, limits=ROOMY, check_s=0).close()
    assert f"the integrity check of {path} stopped after 0 s, unfinished" in caplog.text
    damage_pages(path)
    with pytest.raises(StoreError, match="is damaged"):
        RelayQueue.open(tmp_path, limits=ROOMY)
