"""How the C heap of a long-running process treats large buffers (glibc only).

Opening a large envelope allocates a few buffers of hundreds of kilobytes each (its
base64 text, the ciphertext, the plaintext, the decoded strings). By default glibc maps
fresh pages from the kernel for each of them and hands them back when they are freed, so
that every large envelope pays a page fault for every 4 KiB it touches: about a quarter
of the time opening a 270 KiB envelope takes. Kept in the heap instead, they are reused.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Final

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD_BYTES: Final = 1024 * 1024
"""Buffers below this size come from the heap (glibc's default: 128 KiB, rising as
large buffers are freed)."""
TRIM_THRESHOLD_BYTES: Final = 8 * 1024 * 1024
"""Free memory at the top of the heap kept for reuse before it is returned."""


def keep_large_buffers() -> bool:
    """Serve buffers up to :data:`MMAP_THRESHOLD_BYTES` from the heap and keep up to
    :data:`TRIM_THRESHOLD_BYTES` free in it; whether the C library took the settings
    (only glibc's ``mallopt`` does)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the process runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    taken = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) \
        and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    log.debug("large buffers kept in the heap: %s", taken)
    return taken
