"""Python's cyclic garbage collector, paused while a large batch of long-lived objects is built.

Decoding a dump, building its snapshot, a solve and printing its plan each allocate hundreds of
thousands of objects that stay alive until the step ends. Every time their number grows by a
quarter the collector walks all of them, to free almost nothing: on a 5,000-node dump that was a
third of the ``plan`` command's time. Reference counting still frees what is dropped; cycles made
in the pause are collected by the first collection after it.
"""

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off for the block, back on after it if it was on before (nesting is safe)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
