"""What a Redis failover goes by, read from the pods: each replica's replication offset and the
hash slots each master serves.

Redis elects the replica with the highest replication offset first (its rank); the slots say
what a shard without a master takes offline. The reads are I/O only: deciding is
``solver.drill``'s job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from models.cluster import Member, Role
from placer.redis.ops import (
    DEFAULT_IO_TIMEOUT_S,
    RedisEndpoint,
    RedisOpsError,
    info_replication,
)
from placer.redis.roles import View

__all__ = ["replication_offsets", "served_slots"]

InfoReader = Callable[[RedisEndpoint, float], Mapping[str, str]]


def served_slots(views: Mapping[str, View]) -> dict[str, int]:
    """Pod key -> hash slots it serves as a master, from that pod's own ``myself`` line."""
    slots: dict[str, int] = {}
    for pod, view in views.items():
        if isinstance(view, RedisOpsError):
            continue
        me = next((n for n in view if n.myself), None)
        if me is not None and me.role == "master":
            slots[pod] = me.slot_count
    return slots


def _offset(info: Mapping[str, str]) -> int | None:
    raw = info.get("slave_repl_offset") or info.get("master_repl_offset")
    return int(raw) if raw is not None and raw.lstrip("-").isdigit() else None


def replication_offsets(
    members: Iterable[Member],
    dial: Callable[[Member], RedisEndpoint | None],
    *,
    timeout_s: float = DEFAULT_IO_TIMEOUT_S,
    reader: InfoReader = info_replication,
    workers: int = 16,
) -> tuple[dict[str, int], dict[str, str]]:
    """(pod key -> replication offset, pod key -> why it could not be read) for the replicas.

    Only running members with a pod IP whose role is replica are asked (``INFO replication``).
    """
    targets = {
        m.key: endpoint
        for m in members
        if m.role is Role.REPLICA and not m.pod.pending and (endpoint := dial(m)) is not None
    }

    def one(endpoint: RedisEndpoint) -> int | str:
        try:
            offset = _offset(reader(endpoint, timeout_s))
        except RedisOpsError as exc:
            return str(exc)
        return offset if offset is not None else f"{endpoint}: INFO replication has no offset"

    offsets: dict[str, int] = {}
    problems: dict[str, str] = {}
    if not targets:
        return offsets, problems
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(targets)))) as pool:
        for key, result in zip(targets, pool.map(one, targets.values()), strict=True):
            if isinstance(result, int):
                offsets[key] = result
            else:
                problems[key] = result
    return offsets, problems
