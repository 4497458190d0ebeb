"""The application edge: the command line, Kubernetes, Redis, metrics.

A command's time limit counts from when its process began, as the person who typed it counts.
"""

import time

_STARTED: float | None = time.monotonic()


def command_started() -> float:
    """When this command began: the process start for the first command a process runs (the
    interpreter and imports are inside its time limit), the call itself for any later one (a
    test running many commands in one process)."""
    global _STARTED
    started, _STARTED = _STARTED, None
    return started if started is not None else time.monotonic()
