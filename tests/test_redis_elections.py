"""placer.redis.elections: Redis Cluster's election timers, as the pods carry them."""

from collections.abc import Mapping

import pytest

from placer.redis.elections import (
    NO_ELECTION_UNTIL,
    NO_VOTES_UNTIL,
    cannot_stand,
    marks,
    no_votes,
    stands_again_after,
    votes_again_after,
)

NOON = 1_796_558_400.0  # 2026-12-06T12:00:00Z


def test_the_timers_follow_redis_s_rules() -> None:
    # auth_timeout = max(2 x node-timeout, 2 s); a replica stands again after 2 x that
    assert stands_again_after(5.0) == 20.0 and stands_again_after(0.5) == 4.0
    assert votes_again_after(5.0) == 10.0


def test_marks_hold_a_failover_back_until_they_end() -> None:
    stood, replaced = marks(5.0, NOON)
    assert stood == {NO_ELECTION_UNTIL: "2026-12-06T12:00:20Z"}
    assert replaced == {NO_VOTES_UNTIL: "2026-12-06T12:00:10Z"}
    assert cannot_stand("ns/r", stood, NOON + 19) == (
        "Redis lets ns/r stand for election again at 12:00:20Z (4 x cluster-node-timeout "
        "after it stood)"
    )
    assert cannot_stand("ns/r", stood, NOON + 20) == ""
    assert no_votes("ns/m", replaced, NOON + 9).startswith("Redis's masters vote about ns/m again")
    assert no_votes("ns/m", replaced, NOON + 10) == ""
    # the other timer, a missing or unreadable mark: nothing held
    assert cannot_stand("ns/m", replaced, NOON) == "" and no_votes("ns/r", stood, NOON) == ""
    assert cannot_stand("ns/r", {NO_ELECTION_UNTIL: "soon"}, NOON) == ""


def test_a_failover_is_under_way_from_its_start_mark_to_its_end_mark() -> None:
    from placer.redis.elections import (
        FAILOVER_UNTIL,
        failing_over,
        mark_failover_ended,
        mark_failover_started,
    )

    pod: dict[str, str] = {}

    def annotate(namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        assert (namespace, name) == ("ns", "m")
        pod.update(annotations)

    mark_failover_started(annotate, "ns/m", NOON, 30.0)
    assert pod == {FAILOVER_UNTIL: "2026-12-06T12:00:30Z"}  # its timeout: the latest it ends
    assert failing_over("ns/m", pod, NOON + 1) == (
        "a failover from ns/m is under way (until 12:00:30Z at the latest)"
    )
    assert failing_over("ns/m", pod, NOON + 30) == ""  # a failover never ended runs out
    mark_failover_ended(annotate, "ns/m", NOON + 1.7)
    assert pod == {FAILOVER_UNTIL: "2026-12-06T12:00:01Z"}
    assert failing_over("ns/m", pod, NOON + 1.7) == ""
    assert failing_over("ns/m", {}, NOON) == ""


def test_a_mark_that_cannot_be_written_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from placer.redis.elections import mark_failover_started

    def refused(namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        raise RuntimeError("the API server is away")

    mark_failover_started(refused, "ns/m", NOON, 30.0)
    assert "cannot mark the failover on ns/m: the API server is away" in caplog.text
