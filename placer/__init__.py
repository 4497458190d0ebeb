"""The application edge: the command line, Kubernetes, Redis, metrics.

A command's time limit counts from when its process began, as the person who typed it counts.
"""

import os
import time


def _process_start() -> float:
    """When this process began, on the monotonic clock: the interpreter's own start-up counts
    too (Linux: /proc/self/stat; elsewhere, or if unreadable, now)."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # starttime, in clock ticks since boot (field 22 of proc(5))
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0 <= age < 60 else now


_STARTED: float | None = _process_start()


def command_started() -> float:
    """When this command began: the process start for the first command a process runs (the
    interpreter and imports are inside its time limit), the call itself for any later one (a
    test running many commands in one process)."""
    global _STARTED
    started, _STARTED = _STARTED, None
    return started if started is not None else time.monotonic()
