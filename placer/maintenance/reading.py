"""What the guard decides from, read fresh: the managed pods and their nodes from the API server
(or, in the binder's process, from its watch cache while that is readable), each member's role
and replication health from its own Redis.

Roles come from ``CLUSTER NODES`` (placer.redis.roles), never from a label written before the
last failover; health from ``INFO replication``: a replica is in sync when its link to the
master is up, no full sync runs, and its offset is within ``max_lag`` bytes of the master's.
Nothing here decides (solver.handover does) and nothing raises for one pod that does not answer:
that pod is not serving, which is what it means for its shard.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from models.cluster import Role
from models.kube_objects import build_snapshot
from models.maintenance import node_going
from models.policy import Policy
from models.snapshot import Snapshot
from placer.kube.objects import pod_key, pod_serving
from placer.kube.source import ListedObjects, ObjectSource
from placer.redis.access import AccessError, Dialer, resolve_access
from placer.redis.ops import RedisEndpoint, RedisOpsError, info_replication
from placer.redis.roles import RoleMismatch, apply_roles, read_views, resolve_roles
from solver.handover import MemberHealth

MAX_LAG_BYTES = 1 << 20
"""A replica this far behind its master's offset is not in sync (a plain failover would make the
master pause writes while it catches up)."""

IO_TIMEOUT_S = 1.0
"""Per Redis call: the webhook answers within the API server's timeout whatever one pod does."""


@dataclass(frozen=True)
class GuardView:
    """One reading of the cluster and of Redis."""

    snapshot: Snapshot
    """Roles as Redis reports them where it answered."""
    health: Mapping[str, MemberHealth]
    going_nodes: frozenset[str]
    """Nodes cordoned or tainted for disruption."""
    deleting: frozenset[str]
    """Pods with a deletionTimestamp: already on their way out."""
    pods: Mapping[str, Mapping[str, Any]]
    """The managed pods' API objects, by ``namespace/name`` (Events name them)."""
    dial: Dialer | None
    """How each member's Redis is reached; None when the credentials could not be read."""
    mismatches: tuple[RoleMismatch, ...]
    unreachable: tuple[str, ...]
    problems: tuple[str, ...]
    read_at: float

    def going_pods(self) -> frozenset[str]:
        return frozenset(
            m.key for m in self.snapshot.members if m.pod.node_name in self.going_nodes
        )


def _int(info: Mapping[str, str], key: str) -> int | None:
    raw = info.get(key)
    return int(raw) if raw is not None and raw.lstrip("-").isdigit() else None


def replication_health(
    snapshot: Snapshot,
    dial: Dialer,
    ready: Mapping[str, bool],
    *,
    max_lag: int = MAX_LAG_BYTES,
    timeout_s: float = IO_TIMEOUT_S,
) -> tuple[dict[str, MemberHealth], list[str]]:
    """Each running member's health, and the pods whose Redis did not answer."""
    targets: dict[str, RedisEndpoint] = {}
    for m in snapshot.members:
        if not m.pod.pending and (endpoint := dial(m)) is not None:
            targets[m.key] = endpoint

    def one(endpoint: RedisEndpoint) -> Mapping[str, str] | RedisOpsError:
        try:
            return info_replication(endpoint, timeout_s)
        except RedisOpsError as exc:
            return exc

    infos: dict[str, Mapping[str, str] | RedisOpsError] = {}
    if targets:
        with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
            infos = dict(zip(targets, pool.map(one, targets.values()), strict=True))
    master_offset: dict[str, int] = {}
    for m in snapshot.members:
        info = infos.get(m.key)
        if isinstance(info, Mapping) and info.get("role") == "master":
            offset = _int(info, "master_repl_offset")
            if offset is not None:
                master_offset[m.shard_key] = offset
    health: dict[str, MemberHealth] = {}
    silent: list[str] = []
    for m in snapshot.members:
        if m.pod.pending:
            continue
        info = infos.get(m.key)
        if not isinstance(info, Mapping):
            if info is not None:
                silent.append(f"{m.key}: {info}")
            health[m.key] = MemberHealth(ready=False, in_sync=False)
            continue
        offset = _int(info, "slave_repl_offset") or 0
        if info.get("role") == "master":
            in_sync = True
        else:
            lag = master_offset.get(m.shard_key, offset) - offset
            in_sync = (
                info.get("master_link_status") == "up"
                and info.get("master_sync_in_progress", "0") == "0"
                and lag <= max_lag
            )
        health[m.key] = MemberHealth(ready=ready.get(m.key, False), in_sync=in_sync, offset=offset)
    return health, silent


def read_guard_view(
    adapter: Any,
    policy: Policy,
    *,
    port: int,
    timeout_s: float = IO_TIMEOUT_S,
    max_lag: int = MAX_LAG_BYTES,
    objects: ObjectSource | None = None,
) -> GuardView:
    """Nodes, managed pods and StatefulSets from ``objects`` (default: listed through
    ``adapter``; in the binder's process, its watch cache), then every member's Redis."""
    source = objects if objects is not None else ListedObjects(adapter)
    read = source.read_objects(policy.selector)
    pods = read.pods
    snapshot = build_snapshot([*read.nodes, *pods, *read.statefulsets], policy)
    by_key: dict[str, Mapping[str, Any]] = {pod_key(obj): obj for obj in pods}
    ready = {key: pod_serving(obj) for key, obj in by_key.items()}
    deleting = frozenset(
        key for key, obj in by_key.items() if (obj.get("metadata") or {}).get("deletionTimestamp")
    )
    problems: list[str] = []
    mismatches: tuple[RoleMismatch, ...] = ()
    unreachable: tuple[str, ...] = ()
    health: dict[str, MemberHealth] = {}
    dial: Dialer | None = None
    try:
        dial = resolve_access(
            snapshot,
            policy,
            port=port,
            read_pod=adapter.get_pod,
            read_secret=adapter.get_secret,
        )
    except AccessError as exc:
        problems.append(f"redis credentials: {exc}")
        health = {
            m.key: MemberHealth(ready=ready.get(m.key, False), in_sync=False)
            for m in snapshot.members
            if not m.pod.pending
        }
    else:
        problems.extend(f"redis credentials: {what}: {why}" for what, why in dial.issues)
        everyone = [*snapshot.members, *snapshot.skipped_members]
        views = read_views(everyone, dial, timeout_s=timeout_s)
        reading = resolve_roles(everyone, views, port)
        snapshot = apply_roles(snapshot, reading)
        mismatches = reading.mismatches
        unreachable = reading.unreachable
        health, silent = replication_health(
            snapshot, dial, ready, max_lag=max_lag, timeout_s=timeout_s
        )
        problems.extend(silent)
    going = frozenset(n.name for n in snapshot.nodes if node_going(n))
    return GuardView(
        snapshot=snapshot,
        health=health,
        going_nodes=going,
        deleting=deleting,
        pods=by_key,
        dial=dial,
        mismatches=mismatches,
        unreachable=unreachable,
        problems=tuple(problems),
        read_at=time.monotonic(),
    )


def masters_on(view: GuardView, nodes: frozenset[str]) -> list[str]:
    """Masters (as Redis says) whose pods run on ``nodes``."""
    return sorted(
        m.key
        for m in view.snapshot.members
        if m.pod.node_name in nodes and m.role == Role.MASTER and m.key not in view.deleting
    )
