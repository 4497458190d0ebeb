"""Redis Cluster's election timers: when a failover through a node goes quickly again.

A replica that stood for election (a ``CLUSTER FAILOVER`` it won counts) cannot stand again
before ``max(4 x cluster-node-timeout, 4 s)`` has passed since. A ``CLUSTER FAILOVER`` sent to it
meanwhile is accepted and pauses its master's writes, and the election waits for the end of that
time (Redis's ``clusterHandleSlaveFailover``: "Failover attempt expired", ``auth_retry_time``).
The masters do not vote about a master whose replica they voted for within ``2 x
cluster-node-timeout`` (``clusterSendFailoverAuthIfNeeded``). A handover that would meet either
waits for it while the master serves, instead of pausing writes for seconds (3.1 s in a drain
5 s after a restore, with ``cluster-node-timeout`` 5 s).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from placer.kube.objects import read_utc_stamp, utc_stamp
from placer.redis.ops import RedisEndpoint, RedisOpsError, config_get

log = logging.getLogger(__name__)

NO_ELECTION_UNTIL = "redis-placer.io/no-election-until"
"""On a pod that stood for election in a failover of redis-placer's (the guard's, a rebalance's):
until when (UTC) Redis lets it not stand again. Whoever fails over next reads it: another
replica of the guard, a leader after a handoff, the rebalance CronJob."""
NO_VOTES_UNTIL = "redis-placer.io/no-votes-until"
"""On a master replaced in such a failover: until when (UTC) the masters vote about it not."""

FAILOVER_UNTIL = "redis-placer.io/failover-until"
"""On the master of a shard that a failover of redis-placer's (the guard's, a rebalance's) hands
over: until when (UTC) it is under way. Written before ``CLUSTER FAILOVER`` as its timeout's
end, and again once it is over as the time it ended. A replica of the guard that did not make
the failover lets no member of that shard stop while the time is ahead, and reads the cluster
again before answering when the pod carries another value than its reading shows: that reading
is from before the failover ended, and shows the roles from before it."""

REDIS_DEFAULT_NODE_TIMEOUT_S = 15.0
"""Redis's own default, assumed when the setting cannot be read (``CONFIG`` renamed away)."""


def stands_again_after(node_timeout_s: float) -> float:
    """Seconds after its election before a replica may stand for another."""
    return max(4.0 * node_timeout_s, 4.0)


def votes_again_after(node_timeout_s: float) -> float:
    """Seconds after a master was replaced before the masters vote about it again."""
    return 2.0 * node_timeout_s


def node_timeout(endpoint: RedisEndpoint, timeout_s: float = 1.0) -> float:
    """``cluster-node-timeout`` in seconds as ``endpoint`` has it; Redis's default when it does
    not say."""
    try:
        raw = config_get(endpoint, "cluster-node-timeout", timeout_s)
    except RedisOpsError as exc:
        log.info("cluster-node-timeout of %s unread (%s): 15 s assumed", endpoint.address, exc)
        return REDIS_DEFAULT_NODE_TIMEOUT_S
    try:
        return int(raw or "") / 1000.0
    except ValueError:
        return REDIS_DEFAULT_NODE_TIMEOUT_S


def marks(node_timeout_s: float, now: float) -> tuple[dict[str, str], dict[str, str]]:
    """The annotations after a failover ended at ``now`` (seconds since the epoch): the pod that
    stood's, and the replaced master's."""
    stand = now + stands_again_after(node_timeout_s)
    vote = now + votes_again_after(node_timeout_s)
    return {NO_ELECTION_UNTIL: _stamp(stand)}, {NO_VOTES_UNTIL: _stamp(vote)}


def mark_failover_started(
    annotate: Callable[[str, str, Mapping[str, str]], Any],
    master: str,
    now: float,
    timeout_s: float,
) -> None:
    """Before a failover from pod ``master`` that gives up after ``timeout_s``: it is under way
    until then at the latest (``FAILOVER_UNTIL``)."""
    _annotate(annotate, master, {FAILOVER_UNTIL: _stamp(now + timeout_s)}, "failover")


def mark_failover_ended(
    annotate: Callable[[str, str, Mapping[str, str]], Any], master: str, now: float
) -> None:
    """After that failover, whatever came of it: it ended at ``now``."""
    _annotate(annotate, master, {FAILOVER_UNTIL: utc_stamp(now)}, "failover's end")


def mark_failover(
    annotate: Callable[[str, str, Mapping[str, str]], Any],
    stood: str,
    replaced: str,
    endpoint: RedisEndpoint,
    now: float,
) -> tuple[float, float]:
    """After a failover to pod ``stood`` (``namespace/name``) from ``replaced``, ended at
    ``now``: both timers written on the two pods by ``annotate(namespace, name, annotations)``
    (a write that fails is logged: the caller still knows), and when each ends."""
    seconds = node_timeout(endpoint)
    for key, mark in zip((stood, replaced), marks(seconds, now), strict=True):
        _annotate(annotate, key, mark, "Redis's election timer")
    return now + stands_again_after(seconds), now + votes_again_after(seconds)


def failing_over(pod: str, annotations: Mapping[str, str], now: float) -> str:
    """Why a failover from master ``pod`` is under way at ``now`` by its mark; "" if none is."""
    until = _running(annotations, FAILOVER_UNTIL, None, now)
    if until is None:
        return ""
    return f"a failover from {pod} is under way (until {_clock(until)} at the latest)"


def _annotate(
    annotate: Callable[[str, str, Mapping[str, str]], Any],
    key: str,
    mark: Mapping[str, str],
    what: str,
) -> None:
    """Write ``mark`` on pod ``key``; a write that fails is logged (the caller still knows)."""
    namespace, name = key.split("/", 1)
    try:
        result = annotate(namespace, name, mark)
        why = "" if getattr(result, "ok", True) else str(getattr(result, "message", result))
    except Exception as exc:
        why = str(exc)
    if why:
        log.warning("cannot mark the %s on %s: %s", what, key, why)


def cannot_stand(
    pod: str, annotations: Mapping[str, str], now: float, also: float | None = None
) -> str:
    """Why Redis would not let ``pod`` stand for election at ``now``, by its mark or ``also``
    (the end of the same timer as this process recorded it), whichever ends later; "" if it
    would."""
    until = _running(annotations, NO_ELECTION_UNTIL, also, now)
    if until is None:
        return ""
    return (
        f"Redis lets {pod} stand for election again at {_clock(until)} (4 x "
        "cluster-node-timeout after it stood)"
    )


def no_votes(
    pod: str, annotations: Mapping[str, str], now: float, also: float | None = None
) -> str:
    """Why the masters would not vote about master ``pod`` at ``now``, likewise; "" if they
    would."""
    until = _running(annotations, NO_VOTES_UNTIL, also, now)
    if until is None:
        return ""
    return (
        f"Redis's masters vote about {pod} again at {_clock(until)} (2 x cluster-node-timeout "
        "after it was failed over)"
    )


def _running(
    annotations: Mapping[str, str], name: str, also: float | None, now: float
) -> float | None:
    """When the timer ends, by the mark ``name`` or ``also``, the later; None once ended."""
    ends = [t for t in (read_utc_stamp(annotations.get(name)), also) if t is not None]
    until = max(ends, default=None)
    return until if until is not None and until > now else None


def _stamp(epoch: float) -> str:
    return utc_stamp(math.ceil(epoch))  # never before Redis's own end


def _clock(epoch: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(epoch))


__all__ = [
    "FAILOVER_UNTIL",
    "NO_ELECTION_UNTIL",
    "NO_VOTES_UNTIL",
    "REDIS_DEFAULT_NODE_TIMEOUT_S",
    "cannot_stand",
    "failing_over",
    "mark_failover",
    "mark_failover_ended",
    "mark_failover_started",
    "marks",
    "no_votes",
    "node_timeout",
    "stands_again_after",
    "votes_again_after",
]
