"""Ids of jobs, batches and taught questions."""

from __future__ import annotations

import os
import threading
import time

_id_lock = threading.Lock()
_last_id_time = [0, 0]
"""The millisecond of the latest id made by this process, and its sequence within it."""


def new_id(prefix: str) -> str:
    """Ids that sort by creation time: 12 hex digits of milliseconds, 4 of a sequence number
    within the millisecond (so one process's ids never tie), then 8 random ones."""
    with _id_lock:
        now = max(int(time.time() * 1000), _last_id_time[0])
        sequence = _last_id_time[1] + 1 if now == _last_id_time[0] else 0
        if sequence > 0xFFFF:
            now, sequence = now + 1, 0
        _last_id_time[:] = [now, sequence]
    return f"{prefix}_{now:012x}{sequence:04x}{os.urandom(4).hex()}"
