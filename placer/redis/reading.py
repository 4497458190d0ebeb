"""What `rebalance` and `drill` read from Redis itself: who may be asked (credentials), and the
roles the pods' Redis reports.

The rules a user meets here: credentials that were named but cannot be had, and a password or
certificate that Redis refuses for a whole Redis cluster, stop the run with one line (exit 2)
before anything changes; pods that merely do not answer keep their labelled roles, with a
warning each. With ``--roles auto`` (the default of a live run) a run from outside the cluster,
where no pod IP is reachable, says so and goes on with the labels.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from models.cluster import Member
from models.plan import SkippedInput
from models.policy import Policy
from models.snapshot import Snapshot
from models.words import first_few
from placer.commands.options import fail
from placer.redis.access import AccessError, Dialer, resolve_access
from placer.redis.ops import (
    PasswordSourceError,
    RedisAuthError,
    RedisOpsError,
    RedisTlsError,
    RedisUnreachable,
    password_from_env_or_file,
)
from placer.redis.roles import (
    RoleReading,
    View,
    apply_roles,
    read_views,
    resolve_roles,
)

__all__ = [
    "access_warnings",
    "reading_warnings",
    "redis_dialer",
    "redis_roles",
    "roles_document",
]

PROBE_PODS = 3
PROBE_TIMEOUT_S = 2.0


def redis_dialer(
    snapshot: Snapshot,
    policy: Policy,
    adapter: Any,
    port: int,
    password_env: str | None,
    password_file: str | None,
    *,
    soft: bool = False,
) -> Dialer | str:
    """Every Redis cluster's endpoints. Named credentials that cannot be read exit 2, or with
    ``soft`` (a dry run that may fall back on the labels) come back as the reason why."""
    env = password_env or policy.redis.password_env
    file = password_file or policy.redis.password_file
    try:
        password = password_from_env_or_file(env, file)
    except PasswordSourceError as exc:
        fail(str(exc))
    source = ""
    if password is not None:
        from_env = bool(env and os.environ.get(env))
        source = f"environment variable {env}" if from_env else f"file {file}"
    try:
        return resolve_access(
            snapshot,
            policy,
            port=port,
            password=password,
            password_source=source,
            read_pod=adapter.get_pod if adapter is not None else None,
            read_secret=adapter.get_secret if adapter is not None else None,
        )
    except AccessError as exc:
        if soft:
            return f"redis credentials: {exc}: roles from the role labels"
        fail(f"redis credentials: {exc}")


def _refused(views: Mapping[str, View], snapshot: Snapshot, dial: Dialer) -> str:
    """A Redis cluster none of whose pods accepted the credentials (password or TLS), as the
    line that stops the run; "" when every cluster has a pod that answered or none refused."""
    cluster_of = {m.key: m.cluster for m in [*snapshot.members, *snapshot.skipped_members]}
    answered = {cluster_of[k] for k, v in views.items() if not isinstance(v, Exception)}
    for key, view in sorted(views.items()):
        cluster = cluster_of[key]
        if isinstance(view, RedisAuthError | RedisTlsError) and cluster not in answered:
            source = dial.of(cluster).source
            told = (
                f" (password from {source})" if source and isinstance(view, RedisAuthError) else ""
            )
            return f"redis cluster {cluster}: {view}{told}; nothing was changed"
    return ""


def redis_roles(
    snapshot: Snapshot,
    dial: Dialer,
    *,
    required: bool,
    views: Mapping[str, View] | None = None,
    replicas_per_shard: int | None = None,
) -> tuple[Snapshot, RoleReading | None, Mapping[str, View]]:
    """``snapshot`` with each member's role as Redis reports it (placer.redis.roles).

    ``required`` (``--roles redis``): exit 2 when no pod answers. Otherwise (``--roles auto``)
    a probe of a few pods comes first, and when none is reachable at all the labels stand
    (reading None). Refused credentials always exit 2. The members of shards the labels left
    out (two labelled masters) are read too: Redis may settle them. Shards are Redis's
    pairing where it differs (``replicas_per_shard``: the setting named then, as
    ``resolve_roles``).
    """
    everyone = [*snapshot.members, *snapshot.skipped_members]
    if views is None:
        if not required:
            running = sorted(
                (m for m in everyone if not m.pod.pending and m.pod.pod_ip),
                key=lambda m: m.key,
            )
            if not running:
                return snapshot, None, {}
            probe = read_views(probe_members(running, snapshot), dial, timeout_s=PROBE_TIMEOUT_S)
            refused = _refused(probe, snapshot, dial)
            if refused:
                fail(refused)
            if probe and all(isinstance(v, RedisUnreachable) for v in probe.values()):
                return snapshot, None, probe
            # The probed pods that answered are not asked again.
            answered = {k: v for k, v in probe.items() if not isinstance(v, RedisOpsError)}
            rest = read_views([m for m in everyone if m.key not in answered], dial)
            views = {**answered, **rest}
        else:
            views = read_views(everyone, dial)
    refused = _refused(views, snapshot, dial)
    if refused:
        fail(refused)
    reading = resolve_roles(everyone, views, dial.port, replicas_per_shard)
    if required and snapshot.running and not reading.read:
        if not reading.tried:
            fail(
                f"--roles redis: none of the {len(snapshot.running)} running Redis pods "
                "has a pod IP (status.podIP); cannot read roles from Redis"
            )
        ip = {m.key: m.pod.pod_ip for m in snapshot.members}
        tried = [f"{k} ({ip[k]}:{dial.port})" for k in reading.tried]
        shown = first_few(tried, 8)
        first = views[reading.tried[0]]
        fail(f"--roles redis: no Redis pod could be read; tried {shown}; first error: {first}")
    return apply_roles(snapshot, reading), reading, views


def probe_members(running: Sequence[Member], snapshot: Snapshot) -> list[Member]:
    """A few running members to probe, each on another zone where it can be (then another
    node): a zone that is down must not pass for a network that cannot reach any pod."""
    zone_of = {n.name: n.zone for n in snapshot.nodes}
    picked: list[Member] = []
    seen_zones: set[str | None] = set()
    seen_nodes: set[str | None] = set()
    for by in ("zone", "node", "any"):
        for m in running:
            if len(picked) == PROBE_PODS:
                return picked
            zone = zone_of.get(m.pod.node_name or "")
            if m in picked or (by == "zone" and zone in seen_zones):
                continue
            if by == "node" and m.pod.node_name in seen_nodes:
                continue
            picked.append(m)
            seen_zones.add(zone)
            seen_nodes.add(m.pod.node_name)
    return picked


def unreachable_note(views: Mapping[str, View]) -> str:
    """Why ``--roles auto`` kept the labels: the pods probed and the first error."""
    if not views:
        return "no running Redis pod has a pod IP (status.podIP): roles from the role labels"
    first = next(iter(views.values()), None)
    return (
        f"no Redis pod answered from here ({len(views)} probed; {first}): roles from the "
        "role labels; in the cluster, or with --roles redis, they are read from Redis"
    )


def access_warnings(dial: Dialer | None) -> list[SkippedInput]:
    """What credentials could not be read, as input warnings (their clusters dialled without)."""
    issues = dial.issues if dial is not None else []
    return [SkippedInput(object=o, message=m, severity="warning") for o, m in issues]


def reading_warnings(reading: RoleReading | None) -> list[SkippedInput]:
    """Roles Redis could not be trusted for, as input warnings (each label stands)."""
    issues = reading.issues if reading is not None else []
    return [SkippedInput(object=i.object, message=i.message, severity="warning") for i in issues]


def roles_document(source: str, reading: RoleReading | None, note: str = "") -> dict[str, Any]:
    """The ``roles`` part of the JSON report."""
    if reading is None:
        return {"source": source, **({"note": note} if note else {})}
    return {
        "source": source,
        "read": list(reading.read),
        "unreachable": list(reading.unreachable),
        "mismatches": [m.model_dump() for m in reading.mismatches],
        **({"shards": dict(sorted(reading.shards.items()))} if reading.shards else {}),
        "issues": [i.model_dump() for i in reading.issues],
    }
