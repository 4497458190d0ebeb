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

from placer.redis.ops import RedisEndpoint, RedisOpsError, config_get

log = logging.getLogger(__name__)

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


__all__ = [
    "REDIS_DEFAULT_NODE_TIMEOUT_S",
    "node_timeout",
    "stands_again_after",
    "votes_again_after",
]
