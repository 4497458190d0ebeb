"""One PodDisruptionBudget per Redis shard: a drain or an eviction takes at most one member of a
shard at a time, so a master and its replica never go down together.

The budget is ``minAvailable: <shard size - 1>``, a number, never ``maxUnavailable: 1``: with
``maxUnavailable`` Kubernetes counts the pods it expects from the scale of the pods' controllers,
and a shard's members belong to a StatefulSet of many shards (the bitnami chart's one set, the
OT operator's leaders and followers), so such a budget would expect every pod of those sets,
find a shard's two, and refuse every eviction. A number of pods is judged on the pods it
selects.

Pure builders of ``policy/v1`` objects, shared by ``redis-placer pdbs`` (a YAML stream for
``kubectl apply -f -``) and the binder's ``--manage-pdbs``.
"""

import hashlib
import re
from collections.abc import Collection, Mapping
from typing import Any

from models.cluster import Member
from models.identity.read import shard_selector
from models.policy import Policy
from models.snapshot import Snapshot
from solver.predicates import requirement_holds

MANAGED_BY = "app.kubernetes.io/managed-by"
BINDER_MANAGER = "redis-placer-binder"
"""``managed-by`` value of the PDBs the binder creates (and may delete)."""
NAME_LIMIT = 63


def pdb_name(cluster: str, shard: str) -> str:
    """``<cluster>-shard-<shard>``, made a DNS-1123 label; a hash keeps altered names unique."""
    wanted = f"{cluster}-shard-{shard}"
    safe = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "-", wanted.lower())).strip("-")
    if safe == wanted and len(safe) <= NAME_LIMIT:
        return safe
    digest = hashlib.sha256(f"{cluster}\0{shard}".encode()).hexdigest()[:8]
    head = safe[: NAME_LIMIT - len(digest) - 1].strip("-") or "shard"
    return f"{head}-{digest}"


def shard_pdb(
    policy: Policy,
    namespace: str,
    cluster: str,
    shard: str,
    pod_names: Collection[str] = (),
    *,
    size: int | None = None,
    labels: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The PDB of one shard (``cluster`` is the cluster label value, not ``ns/name``) of
    ``size`` members (default: as many as ``pod_names``)."""
    members = size if size is not None else max(len(pod_names), 1)
    metadata: dict[str, Any] = {
        "name": pdb_name(cluster, shard),
        "namespace": namespace,
        "labels": {policy.labels.cluster: cluster, policy.labels.shard: shard, **(labels or {})},
    }
    if owner is not None:
        metadata["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata,
        "spec": {
            "minAvailable": max(members - 1, 0),
            "selector": shard_selector(policy, cluster, shard, pod_names),
        },
    }


def shard_pdbs(snapshot: Snapshot, policy: Policy) -> list[dict[str, Any]]:
    """One PDB per shard of the snapshot, running or pending, in shard order."""
    out = []
    for members in snapshot.shards.values():
        first = members[0]
        namespace, cluster = first.cluster.split("/", 1)
        names = [m.pod.name for m in members]
        size = shard_size(members)
        out.append(shard_pdb(policy, namespace, cluster, first.shard, names, size=size))
    return out


def shard_size(members: Collection[Member]) -> int:
    """The members a shard should have: its known size, or those present when more."""
    return max(len(members), max((m.shard_size or 0) for m in members))


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` against labels. As for PDBs, an empty selector matches every
    pod of the namespace and a missing one none."""
    if selector is None:
        return False
    match = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    return all(
        requirement_holds(
            str(r.get("operator")), r.get("values") or [], labels.get(str(r.get("key")))
        )
        for r in selector.get("matchExpressions") or []
    )
