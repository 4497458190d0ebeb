"""The collector helpers: a pause that restores the collector, and settling kept structures."""

import gc
import weakref

import pytest

from solver.collector import Settling, collector_paused


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_pause_restores_the_collector_as_it_was() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_settled_objects_leave_the_collector_and_their_cycles_are_freed_at_the_rescan() -> None:
    settling = Settling(rescan_every=3)
    try:
        gc.collect()
        kept = [{"pod": i} for i in range(1000)]
        garbage = _cycle()  # unreachable once made: only a full collection frees it
        settling.settle()
        assert gc.get_freeze_count() >= len(kept)
        gc.collect()
        assert garbage() is not None, "a settled cycle waits for the rescan"
        settling.settle()
        assert garbage() is not None
        settling.settle()  # the third: everything is collected once, then settled again
        assert garbage() is None
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()


def test_settling_needs_a_positive_rescan_interval() -> None:
    with pytest.raises(ValueError, match="rescan_every"):
        Settling(rescan_every=0)
