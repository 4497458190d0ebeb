"""``rebalance --roles redis``: each member's role as Redis reports it, not as labelled.

Role labels are written by people and by ``--relabel``; Redis changes roles on its own
(an automatic failover, a manual ``CLUSTER FAILOVER``). Planning from stale labels plans
the wrong failovers, so this module reads who is master from ``CLUSTER NODES``.

The decision is pure (``resolve_roles``: members + the views read -> roles and issues);
the I/O is one thin function (``read_views``) with the reader injected. A role is taken
from Redis only when it can be trusted:

- the pod has an IP and answered ``CLUSTER NODES`` itself (an unreachable pod keeps its
  label role, with a warning),
- no view flags its node ``fail``, ``fail?``, ``handshake`` or ``noaddr``,
- every view that lists it gives the same role, and
- other members list it too (a node no peer knows has not joined the cluster).

Per shard, Redis' answer must still make sense: one trusted master at most; a label-only
master beside a Redis-confirmed one counts as a replica (Redis will make it one); a shard
left with no master is kept as labelled. Every departure is an ``Issue`` (severity
``warning``) that names the pod, so nothing is guessed silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from pydantic import BaseModel, ConfigDict

from models.cluster import Member, Role
from models.identity.facts import ordinal
from models.kube_objects import valid_shards
from models.snapshot import Issue, Snapshot
from models.words import first_few, plural
from placer.redis.ops import (
    DEFAULT_IO_TIMEOUT_S,
    ClusterNodeInfo,
    RedisEndpoint,
    RedisOpsError,
    read_cluster_nodes,
)

__all__ = [
    "RoleMismatch",
    "RoleReading",
    "View",
    "apply_roles",
    "read_views",
    "resolve_roles",
]

UNTRUSTED_FLAGS = ("fail", "fail?", "handshake", "noaddr")

View = Sequence[ClusterNodeInfo] | RedisOpsError
"""What one pod answered to ``CLUSTER NODES``: its parsed view, or why it could not be read."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RoleMismatch(_Frozen):
    """A pod whose role label differs from the role Redis reports (and that we use)."""

    pod: str
    label: str | None
    redis: str
    confirmed: bool = True
    """False when the pod's own role was not read (unreachable, flagged) and ``redis`` is
    deduced: another pod leads its shard in Redis, by the cluster's own consensus, so this one
    rejoins as its replica. Relabelled too: a label left saying master would make the shard
    look like it runs two."""

    @property
    def message(self) -> str:
        label = f"labelled {self.label}" if self.label else "not labelled"
        if not self.confirmed:
            return (
                f"pod {self.pod} {label} but counted as {self.redis}: "
                "another pod leads its shard in Redis"
            )
        return f"pod {self.pod} {label} but Redis says {self.redis}"


class RoleReading(_Frozen):
    """The outcome of reading roles from Redis."""

    roles: dict[str, Role]
    """Pod key -> the role used for it (Redis' where trusted, else the label's)."""
    shards: dict[str, str] = {}
    """Pod key -> the shard Redis pairs it into, for the pods read into another one."""
    mismatches: tuple[RoleMismatch, ...] = ()
    issues: tuple[Issue, ...] = ()
    tried: tuple[str, ...] = ()
    """Pods whose ``CLUSTER NODES`` was asked for (running, with a pod IP)."""
    read: tuple[str, ...] = ()
    """Pods that answered."""

    @property
    def unreachable(self) -> tuple[str, ...]:
        return tuple(p for p in self.tried if p not in self.read)


def _role_of(node: ClusterNodeInfo) -> Role | None:
    return {"master": Role.MASTER, "replica": Role.REPLICA}.get(node.role)


def _label(role: Role | None) -> str | None:
    return role.value if role is not None else None


def _warn(obj: str, message: str) -> Issue:
    return Issue(object=obj, message=message, severity="warning")


def _address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class _Cluster:
    """The resolution for one Redis cluster (members sharing ``Member.cluster``)."""

    def __init__(self, members: list[Member], views: Mapping[str, View], port: int) -> None:
        self.members = {m.key: m for m in members}
        self.port = port
        self.issues: list[Issue] = []
        self.views: dict[str, Sequence[ClusterNodeInfo]] = {}
        self.unreachable: set[str] = set()
        for m in members:
            if not m.pod.pod_ip:
                self.issues.append(
                    _warn(
                        f"pod {m.key}", "has no pod IP: its Redis role is unknown; label role kept"
                    )
                )
                continue
            view = views.get(m.key)
            if view is None:
                continue
            if isinstance(view, RedisOpsError):
                self.unreachable.add(m.key)
                self.issues.append(
                    _warn(f"pod {m.key}", f"CLUSTER NODES not read ({view}); label role kept")
                )
            else:
                self.views[m.key] = view
        # Node ID -> pod, from each pod's own "myself" line: robust to announced addresses.
        self.id_to_pod: dict[str, str] = {}
        for key, view in self.views.items():
            me = next((n for n in view if n.myself), None)
            if me is not None:
                self.id_to_pod[me.node_id] = key
        self.by_address: dict[tuple[str, int], str] = {}
        self.by_hostname: dict[tuple[str, int], str] = {}
        for m in members:
            if m.pod.pod_ip:
                self.by_address[(m.pod.pod_ip, port)] = m.key
            self.by_hostname[(m.pod.name, port)] = m.key

    def _pod_of(self, node: ClusterNodeInfo, observer: str) -> str | None:
        if node.myself:
            return observer
        if node.node_id in self.id_to_pod:
            return self.id_to_pod[node.node_id]
        pod = self.by_address.get((node.ip, node.port))
        if pod is None and node.hostname:
            pod = self.by_hostname.get((node.hostname, node.port))
        if pod is None:
            return None
        own_id = next((i for i, p in self.id_to_pod.items() if p == pod), None)
        if own_id is not None and own_id != node.node_id:
            # The pod's address, but another node: a stale entry (e.g. a recreated pod).
            self.issues.append(
                _warn(
                    f"pod {pod}",
                    f"{observer} lists node {node.node_id[:8]} at {node.address}, but the pod "
                    f"is node {own_id[:8]}: stale entry ignored",
                )
            )
            return None
        return pod

    def resolve(self) -> tuple[dict[str, Role], dict[str, str]]:
        """Trusted Redis roles, and for each trusted replica the pod of its master."""
        seen: dict[str, dict[Role, list[str]]] = {}
        flagged: dict[str, list[str]] = {}
        seen_by_others: set[str] = set()
        node_of: dict[str, ClusterNodeInfo] = {}
        strangers: dict[str, str] = {}
        for observer, view in sorted(self.views.items()):
            for node in view:
                pod = self._pod_of(node, observer)
                if pod is None:
                    if not node.myself and node.node_id not in strangers:
                        flags = ",".join(node.flags) or "noflags"
                        where = node.address if node.ip else "no address"
                        strangers[node.node_id] = (
                            f"{observer} lists Redis node {node.node_id[:8]} ({where}, {flags}) "
                            f"that matches no managed pod of this cluster on port {self.port}"
                        )
                    continue
                if pod != observer:
                    seen_by_others.add(pod)
                bad = [f for f in node.flags if f in UNTRUSTED_FLAGS]
                role = _role_of(node)
                if bad or role is None:
                    what = ",".join(bad) if bad else f"role {node.role}"
                    flagged.setdefault(pod, []).append(f"{what} by {observer}")
                    continue
                seen.setdefault(pod, {}).setdefault(role, []).append(observer)
                if pod == observer or pod not in node_of:
                    node_of[pod] = node
        for text in strangers.values():
            self.issues.append(_warn("redis", text))

        trusted: dict[str, Role] = {}
        for key, m in sorted(self.members.items()):
            if key not in self.views:
                # No IP or unreachable (already reported): its label role is kept.
                if key in self.unreachable and key not in seen and key not in flagged:
                    self.issues.append(
                        _warn(
                            f"pod {key}",
                            f"{_address(m.pod.pod_ip or '?', self.port)} is in no CLUSTER NODES "
                            f"view read (from {', '.join(sorted(self.views)) or 'no pod'})",
                        )
                    )
                continue
            if flagged.get(key):
                self.issues.append(
                    _warn(
                        f"pod {key}",
                        f"flagged {'; '.join(flagged[key])}: its Redis role is not trusted; "
                        "label role kept",
                    )
                )
                continue
            roles = seen.get(key, {})
            if len(roles) > 1:
                says = "; ".join(f"{r.value} per {', '.join(o)}" for r, o in sorted(roles.items()))
                self.issues.append(
                    _warn(f"pod {key}", f"CLUSTER NODES views disagree ({says}); label role kept")
                )
                continue
            if len(self.views) > 1 and key not in seen_by_others:
                self.issues.append(
                    _warn(
                        f"pod {key}",
                        f"{_address(m.pod.pod_ip or '?', self.port)} is in no other member's "
                        "CLUSTER NODES view: not joined to this Redis cluster? label role kept",
                    )
                )
                continue
            if roles:
                trusted[key] = next(iter(roles))
        master_pod: dict[str, str] = {}
        for key, role in trusted.items():
            node = node_of[key]
            if role is Role.REPLICA and node.master_id:
                pod = self.id_to_pod.get(node.master_id)
                if pod is not None:
                    master_pod[key] = pod
        return trusted, master_pod


def _settle_shard(
    shard_key: str, group: list[Member], trusted: Mapping[str, Role], issues: list[Issue]
) -> dict[str, Role]:
    """The roles of one shard: Redis' where trusted, unless that leaves the shard inconsistent."""
    labels = {m.key: m.role for m in group}
    live = [m for m in group if not m.pod.pending and not m.pod.deleting]
    confirmed = sorted(m.key for m in live if trusted.get(m.key) is Role.MASTER)
    if len(confirmed) > 1:
        issues.append(
            _warn(
                f"shard {shard_key}",
                f"Redis reports {len(confirmed)} masters ({', '.join(confirmed)}): "
                "label roles kept for the shard",
            )
        )
        return {k: r for k, r in labels.items() if r is not None}
    roles: dict[str, Role] = {}
    for m in group:
        role = trusted.get(m.key, m.role)
        if confirmed and m.key != confirmed[0] and role is Role.MASTER and not m.pod.deleting:
            issues.append(
                _warn(
                    f"pod {m.key}",
                    f"labelled master, its Redis role is not known, and Redis reports "
                    f"{confirmed[0]} as the shard's master: counted as a replica",
                )
            )
            role = Role.REPLICA
        if role is not None:
            roles[m.key] = role
    had_master = any(labels[m.key] is Role.MASTER for m in live)
    if had_master and not any(roles.get(m.key) is Role.MASTER for m in live):
        issues.append(
            _warn(
                f"shard {shard_key}",
                "the roles Redis reports leave it without a master among its pods: "
                "label roles kept for the shard",
            )
        )
        return {k: r for k, r in labels.items() if r is not None}
    return roles


def redis_shards(
    members: Sequence[Member], trusted: Mapping[str, Role], master_pod: Mapping[str, str]
) -> dict[str, str]:
    """Shard membership as Redis pairs it, where that differs from what the pods were read as:
    pod key -> the shard it belongs to (pure).

    Each trusted master and the trusted replicas that replicate it are one shard. It keeps the
    name of the master's shard, or else of a member's, unless a shard named earlier (or a pod
    Redis did not settle) holds that name; then the master's StatefulSet ordinal, or its pod
    name. Nothing changes where every replica's master is in its own shard and no shard has two
    trusted masters."""
    groups: dict[str, list[str]] = {}
    for key, role in trusted.items():
        if role is Role.MASTER:
            groups.setdefault(key, [key])
    for replica, master in master_pod.items():
        if trusted.get(master) is Role.MASTER and replica in trusted:
            groups[master].append(replica)
    by_key = {m.key: m for m in members}
    pairs = {k for group in groups.values() for k in group}
    split = any(by_key[k].shard_key != by_key[g[0]].shard_key for g in groups.values() for k in g)
    masters_of: dict[str, int] = {}
    for master in groups:
        masters_of[by_key[master].shard_key] = masters_of.get(by_key[master].shard_key, 0) + 1
    if not split and all(n == 1 for n in masters_of.values()):
        return {}
    taken = {(m.cluster, m.shard) for m in members if m.key not in pairs}
    moved: dict[str, str] = {}
    for master, group in sorted(groups.items()):
        head = by_key[master]
        named = Counter(by_key[k].shard for k in group[1:])
        index = ordinal(head.pod)
        names = [
            head.shard,
            *(n for n, _ in named.most_common()),
            *([str(index)] if index is not None else []),
            head.pod.name,
        ]
        name = next(n for n in names if (head.cluster, n) not in taken)
        taken.add((head.cluster, name))
        moved.update({k: name for k in group if by_key[k].shard != name})
    return moved


def moved_member(member: Member, moved: Mapping[str, str]) -> Member:
    """``member`` in the shard Redis pairs it into (``redis_shards``), if another."""
    shard = moved.get(member.key)
    return member if shard is None else member.model_copy(update={"shard": shard})


def _pairing_issues(
    members: Sequence[Member],
    moved: Mapping[str, str],
    trusted: Mapping[str, Role],
    master_pod: Mapping[str, str],
    replicas_per_shard: int | None,
) -> list[Issue]:
    """One line per Redis cluster whose pairing differs from the pods' reading: the shards are
    Redis's, and, where a formation read them from a replica count, the setting to change."""
    out = []
    for cluster in sorted({m.cluster for m in members if m.key in moved}):
        mine = {m.key for m in members if m.cluster == cluster}
        masters = [k for k in mine if trusted.get(k) is Role.MASTER]
        counts = Counter(master_pod[k] for k in mine if k in master_pod and k in trusted)
        least = min((counts.get(k, 0) for k in masters), default=0)
        pods = sorted(k for k in mine if k in moved)
        taken = f"shards taken from Redis ({plural(len(pods), 'pod')} moved: {first_few(pods, 3)})"
        settled = all(k in trusted for k in mine)  # else a count of replicas is a guess
        if replicas_per_shard is None:
            message = f"Redis pairs its pods otherwise than their shard labels say: {taken}"
        elif settled and least != replicas_per_shard:
            message = (
                f"Redis pairs each master with {plural(least, 'replica')} or more, not "
                f"identity.replicasPerShard {replicas_per_shard}: {taken}; set "
                f"identity.replicasPerShard: {least}"
            )
        else:
            message = (
                f"Redis pairs its pods otherwise than identity.replicasPerShard "
                f"{replicas_per_shard} reads them: {taken}"
            )
        out.append(_warn(f"redis cluster {cluster}", message))
    return out


def resolve_roles(
    members: Iterable[Member],
    views: Mapping[str, View],
    port: int,
    replicas_per_shard: int | None = None,
) -> RoleReading:
    """Decide each member's role, and its shard where Redis pairs it otherwise, from the
    ``CLUSTER NODES`` views read (pure).

    ``views`` maps a pod key to what that pod answered; pods that were not asked are
    simply absent. Redis nodes are matched to pods by node ID (each pod's own
    ``myself`` line), then by ``ip:port`` (pod IP, ``port``), then by announced hostname.
    ``replicas_per_shard``: the policy's identity.replicasPerShard where the formation reads
    shards from it (named in the warning when Redis pairs otherwise), None where labels say.
    """
    members = list(members)
    issues: list[Issue] = []
    trusted: dict[str, Role] = {}
    master_pod: dict[str, str] = {}
    by_cluster: dict[str, list[Member]] = {}
    for m in members:
        by_cluster.setdefault(m.cluster, []).append(m)
    for _, group in sorted(by_cluster.items()):
        cluster = _Cluster([m for m in group if not m.pod.pending], views, port)
        found, masters = cluster.resolve()
        issues.extend(cluster.issues)
        trusted.update(found)
        master_pod.update(masters)
    by_key = {m.key: m for m in members}
    moved = redis_shards(members, trusted, master_pod)
    if moved:
        issues.extend(_pairing_issues(members, moved, trusted, master_pod, replicas_per_shard))
        members = [moved_member(m, moved) for m in members]
    roles: dict[str, Role] = {}
    shards: dict[str, list[Member]] = {}
    for m in members:
        shards.setdefault(m.shard_key, []).append(m)
    for shard_key, group in sorted(shards.items()):
        roles.update(_settle_shard(shard_key, group, trusted, issues))
    mismatches = tuple(
        RoleMismatch(
            pod=m.key,
            label=_label(m.role),
            redis=roles[m.key].value,
            confirmed=trusted.get(m.key) is roles[m.key],
        )
        for m in sorted(members, key=lambda m: m.key)
        if m.key in roles and roles[m.key] is not m.role
    )
    tried = tuple(sorted(k for k in views if k in by_key))
    read = tuple(k for k in tried if not isinstance(views[k], RedisOpsError))
    return RoleReading(
        roles=roles,
        shards=moved,
        mismatches=mismatches,
        issues=tuple(dict.fromkeys(issues)),  # one line per fact, however many views said it
        tried=tried,
        read=read,
    )


def apply_roles(snapshot: Snapshot, reading: RoleReading) -> Snapshot:
    """A new snapshot whose members carry ``reading``'s roles; its issues are appended.

    A shard the labels left out (two labelled masters: one was failed over behind them) comes
    back when Redis settles its roles, and its parse errors go; one Redis cannot settle stays
    out, as read. Where Redis pairs members into other shards, its shards replace the ones
    read from the pods, and so does its warning the reading's of their StatefulSets.
    """

    sizes: Counter[str] = Counter()
    touched: set[str] = set()
    superseded: set[str] = set()
    if reading.shards:
        for m in (*snapshot.members, *snapshot.skipped_members):
            now = moved_member(m, reading.shards)
            sizes[now.shard_key] += 1
            if now is not m:
                touched.update((m.shard_key, now.shard_key))
                superseded.add(f"statefulset {m.pod.namespace}/{m.pod.owner_name}")
        snapshot = snapshot.model_copy(
            update={"issues": tuple(i for i in snapshot.issues if i.object not in superseded)}
        )

    def with_role(m: Member) -> Member:
        m = moved_member(m, reading.shards)
        if m.shard_key in touched:  # as many members as Redis pairs
            m = m.model_copy(update={"shard_size": sizes[m.shard_key]})
        role = reading.roles.get(m.key)
        return m.model_copy(update={"role": role}) if role and role is not m.role else m

    members = [with_role(m) for m in snapshot.members]
    if not snapshot.skipped_members:
        return snapshot.model_copy(
            update={"members": tuple(members), "issues": snapshot.issues + reading.issues}
        )
    settled: list[Issue] = []
    back, still = valid_shards([with_role(m) for m in snapshot.skipped_members], settled)
    back_pods = {m.key for m in back}
    back_shards = {m.shard_key for m in back}
    kept_issues = tuple(
        i
        for i in snapshot.issues
        if i.object not in {f"shard {k}" for k in back_shards}
        and i.object not in {f"pod {k}" for k in back_pods}
    )
    return snapshot.model_copy(
        update={
            "members": tuple(sorted([*members, *back], key=lambda m: m.key)),
            "skipped_members": tuple(still),
            "other_pods": tuple(p for p in snapshot.other_pods if p.key not in back_pods),
            "issues": kept_issues + reading.issues,
        }
    )


Reader = Callable[[RedisEndpoint, float], Sequence[ClusterNodeInfo]]
Dial = Callable[[Member], RedisEndpoint | None]
"""A member's Redis endpoint (its pod IP, the port, its cluster's credentials), None without
an IP (placer.redis.access.Dialer)."""


def read_views(
    members: Iterable[Member],
    dial: Dial,
    *,
    timeout_s: float = DEFAULT_IO_TIMEOUT_S,
    reader: Reader = read_cluster_nodes,
    workers: int = 16,
) -> dict[str, View]:
    """``CLUSTER NODES`` from every running member with a pod IP, a few at a time.

    Errors are returned per pod (never raised): ``RedisOpsError`` texts name the
    endpoint and never the password.
    """
    targets = {
        m.key: endpoint for m in members if not m.pod.pending and (endpoint := dial(m)) is not None
    }

    def one(endpoint: RedisEndpoint) -> View:
        try:
            return reader(endpoint, timeout_s)
        except RedisOpsError as exc:
            return exc

    if not targets:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(targets)))) as pool:
        results = pool.map(one, targets.values())
        return dict(zip(targets, results, strict=True))
