"""``binder --manage-pdbs``: a PodDisruptionBudget for each shard the binder places, gone with it.

The decision is pure (``decide``: the snapshot the binder works on, the PDBs that exist and the
StatefulSets -> what to create and delete); ``PdbManager`` lists, creates and deletes through
the adapter. Nothing is remembered that the cluster does not hold: a shard is the binder's when
its pods carry the binder's mark (bind mode: the policy's ``schedulerName``; gate mode: the
``metadata.name`` pin), and a PDB is the binder's when it carries ``managed-by:
redis-placer-binder``. A shard some other PDB already selects is left alone (two budgets over
one pod make every eviction of it fail). A PDB is owned by the shard's StatefulSet where all its
pods have one, so Kubernetes deletes it with the StatefulSet; the binder deletes it when the
shard has no pod left.
"""

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from models.cluster import Member, Pod
from models.identity.read import selects_by_labels
from models.policy import Policy
from models.snapshot import Snapshot
from placer.kube.adapter import KubeAdapter, KubeApiError
from placer.kube.objects import NODE_NAME_FIELD
from placer.kube.pdb import BINDER_MANAGER, MANAGED_BY, selector_matches, shard_pdb, shard_size

log = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0
"""How often the PDBs are listed again when nothing the binder sees has changed."""


@dataclass(frozen=True)
class PdbChanges:
    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[tuple[str, str, str]] = field(default_factory=list)
    """(namespace, name, uid) of the binder's PDBs whose shard has no pod left."""
    covered: list[str] = field(default_factory=list)
    """Shards the binder placed that another PDB already selects: left alone."""


def placed_by_binder(pod: Pod, policy: Policy, enforce: str) -> bool:
    """Whether the binder put this pod on its node (by the mark its mode leaves)."""
    if pod.node_name is None:
        return False
    if enforce == "bind":
        return pod.scheduler_name == policy.scheduler_name
    return any(
        f.key == NODE_NAME_FIELD and f.operator == "In" and f.values == (pod.node_name,)
        for term in pod.affinity_terms
        for f in term.match_fields
    )


def _owner(
    members: Sequence[Member], statefulsets: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The StatefulSet every member belongs to, as an owner reference (None if not one)."""
    owners = {(m.pod.namespace, m.pod.owner_kind, m.pod.owner_name) for m in members}
    if len(owners) != 1:
        return None
    namespace, kind, name = owners.pop()
    if kind != "StatefulSet" or not name:
        return None
    for sts in statefulsets:
        meta = sts.get("metadata") or {}
        same = meta.get("name") == name and (meta.get("namespace") or "default") == namespace
        if same and meta.get("uid"):
            return {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": name,
                "uid": meta["uid"],
            }
    return None


def _shard_of(pdb: Mapping[str, Any], policy: Policy) -> str | None:
    """``namespace/cluster/shard`` a binder PDB was made for, from its labels."""
    meta = pdb.get("metadata") or {}
    labels = meta.get("labels") or {}
    cluster, shard = labels.get(policy.labels.cluster), labels.get(policy.labels.shard)
    if cluster is None or shard is None:
        return None
    return f"{meta.get('namespace') or 'default'}/{cluster}/{shard}"


def _shards_of_other_pods(snapshot: Snapshot, policy: Policy) -> set[str]:
    """Shards whose running pods the snapshot keeps as plain load (an input issue skipped the
    shard): they still exist, and so does their budget."""
    return {m.shard_key for m in snapshot.skipped_members if not m.pod.pending}


def decide(
    snapshot: Snapshot,
    policy: Policy,
    enforce: str,
    existing: Sequence[Mapping[str, Any]],
    statefulsets: Sequence[Mapping[str, Any]] = (),
) -> PdbChanges:
    """The PDBs to create and delete so that each shard the binder placed has exactly one."""
    ours_by_shard: dict[str, Mapping[str, Any]] = {}
    foreign: dict[str, list[Mapping[str, Any]]] = {}
    for pdb in existing:
        meta = pdb.get("metadata") or {}
        shard = _shard_of(pdb, policy)
        if (meta.get("labels") or {}).get(MANAGED_BY) == BINDER_MANAGER and shard is not None:
            ours_by_shard[shard] = pdb
        else:
            foreign.setdefault(str(meta.get("namespace") or "default"), []).append(pdb)
    create: list[dict[str, Any]] = []
    covered: list[str] = []
    for shard_key, members in snapshot.shards.items():
        if shard_key in ours_by_shard:
            continue
        if not any(placed_by_binder(m.pod, policy, enforce) for m in members):
            continue
        namespace = members[0].pod.namespace
        if any(
            selector_matches((p.get("spec") or {}).get("selector"), m.pod.labels)
            for p in foreign.get(namespace, ())
            for m in members
        ):
            covered.append(shard_key)
            continue
        size = max((m.shard_size or 0) for m in members)
        if not selects_by_labels(policy) and len(members) < size:
            continue  # selected by member names: made once every member exists
        cluster = members[0].cluster.split("/", 1)[1]
        create.append(
            shard_pdb(
                policy,
                namespace,
                cluster,
                members[0].shard,
                [m.pod.name for m in members],
                size=shard_size(members),
                labels={MANAGED_BY: BINDER_MANAGER},
                owner=_owner(members, statefulsets),
            )
        )
    alive = set(snapshot.shards) | _shards_of_other_pods(snapshot, policy)
    delete = [
        (str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid") or ""))
        for shard_key, pdb in sorted(ours_by_shard.items())
        if shard_key not in alive
        for meta in [pdb.get("metadata") or {}]
    ]
    return PdbChanges(create=create, delete=delete, covered=covered)


class PdbManager:
    """Keeps the binder's PDBs in line with its shards; called once per binder step."""

    def __init__(
        self,
        adapter: KubeAdapter,
        policy: Policy,
        enforce: str,
        namespace: str | None = None,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self.adapter = adapter
        self.policy = policy
        self.enforce = enforce
        self.namespace = namespace
        self.refresh_seconds = refresh_seconds
        self._seen: Snapshot | None = None
        self._listed_at = float("-inf")
        self._announced: set[str] = set()

    def reconcile(
        self, snapshot: Snapshot, statefulsets: Sequence[Mapping[str, Any]], now: float
    ) -> PdbChanges | None:
        """Create and delete PDBs; None when nothing changed since the last look (no API call)."""
        if snapshot is self._seen and now - self._listed_at < self.refresh_seconds:
            return None
        try:
            existing = self.adapter.list_pdbs(self.namespace)
        except KubeApiError as exc:
            log.warning("pdbs: cannot list PodDisruptionBudgets: %s", exc)
            return None
        changes = decide(snapshot, self.policy, self.enforce, existing, statefulsets)
        failed = False
        for body in changes.create:
            meta = body["metadata"]
            try:
                result = self.adapter.create_pdb(meta["namespace"], body)
            except KubeApiError as exc:
                log.warning("pdbs: create %s/%s failed: %s", meta["namespace"], meta["name"], exc)
                failed = True
                continue
            log.info("pdb %s/%s %s", meta["namespace"], meta["name"], result)
        for namespace, name, uid in changes.delete:
            try:
                gone = self.adapter.delete_pdb(namespace, name, uid or None)
            except KubeApiError as exc:
                log.warning("pdbs: delete %s/%s failed: %s", namespace, name, exc)
                failed = True
                continue
            log.info("pdb %s/%s %s", namespace, name, "deleted" if gone else "already gone")
        for shard in changes.covered:
            if shard not in self._announced:
                self._announced.add(shard)
                log.info(
                    "pdb for shard %s not created: another PodDisruptionBudget selects its pods",
                    shard,
                )
        # A failed call is retried at the next step; otherwise the next look waits for a change.
        self._seen = None if failed else snapshot
        self._listed_at = now
        return changes
