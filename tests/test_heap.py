"""Memory of the long-running processes: the C heap's settings, what they import."""

from __future__ import annotations

import platform
import subprocess
import sys

from bot.heap import keep_large_buffers


def test_glibc_takes_the_settings_and_any_other_c_library_is_left_as_it_is() -> None:
    assert keep_large_buffers() == (platform.libc_ver()[0] == "glibc")


def test_a_process_with_the_settings_still_frees_what_it_no_longer_holds() -> None:
    # A few hundred envelopes' worth of large buffers, allocated and freed: the resident
    # size stays within the heap's kept free memory, not the sum of them all.
    script = (
        "import resource\n"
        "from bot.heap import keep_large_buffers\n"
        "keep_large_buffers()\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "for i in range(300):\n"
        "    held = [bytes(300_000 + i) for _ in range(4)]\n"
        "    del held\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    grown_kib = int(subprocess.run([sys.executable, "-c", script], check=True,
                                   capture_output=True, text=True).stdout)
    assert grown_kib < 16 * 1024


def test_the_commands_do_not_load_the_http_clients_command_line_tool() -> None:
    # httpx imports its command-line tool (click, rich, pygments) unless told it is
    # absent: megabytes in every bot, relay and hook process for nothing.
    script = (
        "import sys\n"
        "import bot.cli, bot.app, bot.integrations.hook, httpx\n"
        "print(sorted(m for m in ('httpx._main', 'rich', 'pygments') if sys.modules.get(m)))\n"
        "print(httpx.Client.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True).stdout.split()
    assert out == ["[]", "Client"]
