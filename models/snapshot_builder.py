"""The snapshot kept up to date object by object, for a caller that reads the cluster again and
again (the binder, between batches).

``build_snapshot`` reads every object each time: at 15,000 pods that is most of a batch's
reading even with every object parsed once (``ParseCache``). ``SnapshotBuilder`` keeps, per pod,
what it gives the snapshot (a member, load on a node, issues) and, per shard, its validity and
size findings; a pod whose object changed is read again, and the shards it left and joined are
judged again. Everything else is reused.

The result always equals ``build_snapshot`` of the same objects in the builder's order (nodes
by name, pods by the caller's key, then the StatefulSets and volume objects as given):
tests/test_snapshot_builder.py checks this over random sequences of changes. Where a change
reaches beyond one pod and its shard (a node, a StatefulSet, volume objects, a formation that
reads a shard from its siblings) the snapshot is built whole.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from models.cluster import Member, Node, Pod
from models.identity.common import StatefulSets
from models.identity.facts import statefulset_facts
from models.identity.read import Known, per_pod, read_own
from models.identity.result import Unidentified
from models.kube_objects import (
    TERMINAL_PHASES,
    ParseCache,
    build_snapshot,
    finished_issue,
    report_missing_domains,
    report_shard_sizes,
    valid_shards,
)
from models.policy import Policy
from models.snapshot import Issue, Snapshot

Obj = Mapping[str, Any]
PodKey = tuple[str, str]
"""(namespace, name), as the watch cache keys its pods."""


@dataclass(frozen=True)
class _Piece:
    """What one pod object gives the snapshot."""

    obj: Obj
    identity: Known | None
    member: Member | None
    """Its member before the shard's validity is judged (a selected, identified pod)."""
    other: Pod | None
    """Load on its node (a bound pod that is no member)."""
    attach_issues: tuple[Issue, ...]
    """Its claims' warnings (no volume objects: none is in the snapshot)."""
    identity_issues: tuple[Issue, ...]
    pod_issues: tuple[Issue, ...]
    size_source: str


@dataclass
class _ShardPart:
    kept: list[Member]
    skipped: list[Member]
    validity: list[Issue]
    sizes: list[Issue]


class SnapshotBuilder:
    """Builds snapshots for one policy, each from the last and what changed since."""

    def __init__(self, policy: Policy, cache: ParseCache | None = None) -> None:
        self.policy = policy
        self.cache = cache or ParseCache()
        self.incremental_builds = 0
        self.whole_builds = 0
        self._ready = False
        self._node_objs: dict[str, Obj] = {}
        self._sets: tuple[Obj, ...] = ()
        self._set_facts: StatefulSets = {}
        self._nodes: dict[str, Node] = {}
        self._node_issues: tuple[Issue, ...] = ()
        self._domain_issues: tuple[Issue, ...] = ()
        self._pieces: dict[PodKey, _Piece] = {}
        self._order: list[PodKey] = []
        """The pods' keys, sorted: the order in which a whole build reads them."""
        self._shards: dict[str, dict[PodKey, Member]] = {}
        self._parts: dict[str, _ShardPart] = {}
        self._last: Snapshot | None = None

    def build(
        self,
        nodes: Mapping[str, Obj],
        pods: Mapping[PodKey, Obj],
        statefulsets: Iterable[Obj] = (),
        volumes: Iterable[Obj] = (),
        changed: Iterable[PodKey] | None = None,
    ) -> Snapshot:
        """The snapshot of these objects. ``changed`` names the pods whose object may differ
        from the last build's (None: any may); the builder also compares each by identity."""
        sets, extra = tuple(statefulsets), tuple(volumes)
        if (
            extra
            or not per_pod(self.policy)
            or not self._ready
            or not _same(self._node_objs, nodes)
            or not _same_sequence(self._sets, sets)
        ):
            return self._whole(nodes, pods, sets, extra)
        keys = [*pods, *(k for k in self._pieces if k not in pods)] if changed is None else changed
        touched: set[str] = set()
        added = dirty = False
        for key in keys:
            obj = pods.get(key)
            piece = self._pieces.get(key)
            if (piece is None and obj is None) or (piece is not None and obj is piece.obj):
                continue
            if obj is not None and obj.get("kind") != "Pod":
                return self._whole(nodes, pods, sets, extra)  # the whole build says why
            dirty = True
            if piece is not None:
                self._drop(key, piece, touched)
            if obj is not None:
                if piece is None:
                    self._order.append(key)
                    added = True
                self._add(key, self._piece(obj, piece), touched)
            else:
                self._order.remove(key)
        if changed is not None and len(self._pieces) != len(pods):
            return self._whole(nodes, pods, sets, extra)  # ``changed`` missed a pod
        if added:
            self._order.sort()
        if not dirty and self._last is not None:
            return self._last
        self.incremental_builds += 1
        for shard in touched:
            self._judge(shard)
        return self._assemble()

    # -- whole builds ----------------------------------------------------------------------

    def _whole(
        self,
        nodes: Mapping[str, Obj],
        pods: Mapping[PodKey, Obj],
        sets: tuple[Obj, ...],
        extra: tuple[Obj, ...],
    ) -> Snapshot:
        """``build_snapshot`` itself; its parts are kept for the next build when it can be
        incremental."""
        self.whole_builds += 1
        self._ready = False
        order = sorted(pods)
        objects = [
            *(nodes[name] for name in sorted(nodes)),
            *(pods[key] for key in order),
            *sets,
            *extra,
        ]
        snapshot = build_snapshot(objects, self.policy, self.cache)
        if extra or not per_pod(self.policy):
            return snapshot
        self._node_objs = dict(nodes)
        self._sets = sets
        self._set_facts = {}
        for obj in sets:
            facts = statefulset_facts(obj)
            self._set_facts[(facts.namespace, facts.name)] = facts
        issues: list[Issue] = []
        self._nodes = {}
        for name in sorted(nodes):
            node = self.cache.node(nodes[name], self.policy, issues)
            self._nodes[node.name] = node
        self._node_issues = tuple(issues)
        missing: list[Issue] = []
        report_missing_domains(self._nodes, self.policy, missing)
        self._domain_issues = tuple(missing)
        self._pieces, self._order, self._shards, self._parts = {}, order, {}, {}
        touched: set[str] = set()
        for key in order:  # a whole build reads every identity afresh
            self._add(key, self._piece(pods[key], None), touched)
        for shard in touched:
            self._judge(shard)
        self._ready = True
        self._last = snapshot
        return snapshot

    # -- one pod ---------------------------------------------------------------------------

    def _piece(self, obj: Obj, earlier: _Piece | None) -> _Piece:
        """What ``build_snapshot`` makes of one pod object (no volume objects: a claim only
        warns)."""
        pod = self.cache.pod(obj)
        issues: list[Issue] = []
        if pod.claims:
            if pod.pending:
                issues.extend(
                    Issue(
                        object=f"pod {pod.key}",
                        message=f"claim {pod.namespace}/{name} is not in the snapshot: "
                        "placed as if the volume put no constraint on the node",
                        severity="warning",
                    )
                    for name in pod.claims
                )
            pod = pod.model_copy(update={"volumes": ()})
        attach = tuple(issues)
        if pod.phase in TERMINAL_PHASES:
            said = (finished_issue(pod),) if self.policy.selects(pod.labels) else ()
            return _Piece(obj, None, None, None, attach, (), said, "")
        if not self.policy.selects(pod.labels):
            other = None if pod.pending else pod
            return _Piece(obj, None, None, other, attach, (), (), "")
        identity = read_own(
            pod, self._set_facts, self.policy, earlier.identity if earlier is not None else None
        )
        found = identity[2]
        own: list[Issue] = []
        if isinstance(found, Unidentified):
            own.append(Issue(object=f"pod {pod.key}", message=found.message))
            other = None if pod.pending else pod
            return _Piece(obj, identity, None, other, attach, identity[3], tuple(own), "")
        if found.role is None and not pod.pending:
            own.append(
                Issue(
                    object=f"pod {pod.key}",
                    message=f"running pod has no {self.policy.labels.role!r} label: "
                    "its shard is skipped",
                )
            )
        member = self.cache.member(
            pod, f"{pod.namespace}/{found.cluster}", found.shard, found.role, found.size,
            found.ordered,
        )  # fmt: skip
        if pod.node_name is not None and pod.node_name not in self._nodes:
            own.append(
                Issue(
                    object=f"pod {pod.key}",
                    message=f"bound to node {pod.node_name!r}, which is not in the snapshot: "
                    "counted as lost",
                    severity="warning",
                )
            )
        return _Piece(
            obj, identity, member, None, attach, identity[3], tuple(own), found.size_source or ""
        )

    def _add(self, key: PodKey, piece: _Piece, touched: set[str]) -> None:
        self._pieces[key] = piece
        if piece.member is not None:
            shard = piece.member.shard_key
            self._shards.setdefault(shard, {})[key] = piece.member
            touched.add(shard)

    def _drop(self, key: PodKey, piece: _Piece, touched: set[str]) -> None:
        del self._pieces[key]
        if piece.member is not None:
            shard = piece.member.shard_key
            members = self._shards[shard]
            del members[key]
            if not members:
                del self._shards[shard]
            touched.add(shard)

    # -- one shard -------------------------------------------------------------------------

    def _judge(self, shard: str) -> None:
        """The shard's validity and size findings, as the whole build makes them."""
        found = self._shards.get(shard)
        if not found:
            self._parts.pop(shard, None)
            return
        group = [found[k] for k in sorted(found)]
        validity: list[Issue] = []
        kept, skipped = valid_shards(group, validity)
        sources = {
            m.key: self._pieces[k].size_source
            for k, m in found.items()
            if self._pieces[k].size_source
        }
        sizes: list[Issue] = []
        report_shard_sizes(kept, sources, sizes)
        self._parts[shard] = _ShardPart(kept, skipped, validity, sizes)

    # -- the snapshot ----------------------------------------------------------------------

    def _assemble(self) -> Snapshot:
        pieces = [self._pieces[k] for k in self._order]
        issues = [*self._node_issues]
        for piece in pieces:
            issues.extend(piece.attach_issues)
        issues.extend(self._domain_issues)
        for piece in pieces:
            issues.extend(piece.identity_issues)
        for piece in pieces:
            issues.extend(piece.pod_issues)
        parts = [self._parts[s] for s in sorted(self._parts)]
        for part in parts:
            issues.extend(part.validity)
        for part in parts:
            issues.extend(part.sizes)
        members = [m for part in parts for m in part.kept]
        skipped = [m for part in parts for m in part.skipped]
        others = [p.other for p in pieces if p.other is not None]
        others.extend(m.pod for m in skipped if not m.pod.pending)
        assert self._last is not None
        # Every part is a validated value already: constructed, not validated again, so the
        # nodes stay the last snapshot's tuple, by identity, which the caches keyed on it
        # (solver.survival's open domains) recognise; validation would copy it.
        snapshot = Snapshot.model_construct(
            nodes=self._last.nodes,
            members=tuple(sorted(members, key=_member_key)),
            other_pods=tuple(sorted(others, key=_pod_key)),
            issues=tuple(issues),
            skipped_members=tuple(sorted(skipped, key=_member_key)),
            free_volumes=(),
        )
        # The nodes did not change: their index is the last snapshot's.
        snapshot.__dict__["node_by_name"] = self._last.node_by_name
        self._last = snapshot
        return snapshot


def _same(kept: Mapping[str, Obj], now: Mapping[str, Obj]) -> bool:
    return len(kept) == len(now) and all(kept.get(k) is v for k, v in now.items())


def _same_sequence(kept: tuple[Obj, ...], now: tuple[Obj, ...]) -> bool:
    """The same objects, or the same versions of them (a fresh list of unchanged objects)."""
    return len(kept) == len(now) and all(
        a is b or _version_of(a) == _version_of(b) is not None
        for a, b in zip(kept, now, strict=True)
    )


def _version_of(obj: Obj) -> tuple[str, str, str] | None:
    """(namespace, name, resourceVersion): the server's word that the object is the same."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("resourceVersion"):
        return None
    return (str(meta.get("namespace")), str(meta.get("name")), str(meta["resourceVersion"]))


def _member_key(member: Member) -> str:
    return member.key


def _pod_key(pod: Pod) -> str:
    return pod.key
