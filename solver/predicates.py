"""Whether a pod may run on a node, ignoring capacity: readiness, taints, nodeSelector, nodeAffinity,
and where its persistent volumes can be (solver/volumes.py).

Used to build the solver's candidate sets and by the greedy baseline. The independent checker
(solver/check.py) has its own implementation on purpose.
"""

from collections import Counter
from collections.abc import Sequence

from models.cluster import Node, Pod, SelectorTerm, Taint, Toleration
from models.maintenance import node_going
from solver import volumes

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def node_accepts_new_pods(node: Node) -> bool:
    """Ready, zoned, and not about to be drained: cordoned or tainted for disruption
    (models/maintenance.py), even where a pod tolerates the taint."""
    return node.ready and node.zone is not None and not node_going(node)


def tolerates(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    for tol in tolerations:
        if tol.effect and tol.effect != taint.effect:
            continue
        if tol.operator == "Exists":
            if not tol.key or tol.key == taint.key:
                return True
        elif tol.key == taint.key and (tol.value or "") == (taint.value or ""):
            return True
    return False


def requirement_holds(operator: str, values: Sequence[str], value: str | None) -> bool:
    """One selector requirement against a label's value (None: the label is absent); the
    operators of node selectors, of which label selectors (PDBs) use the first four."""
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if value is None or not value.lstrip("-").isdigit():
        return False
    if operator == "Gt":
        return int(value) > int(values[0])
    if operator == "Lt":
        return int(value) < int(values[0])
    return False


def _term_holds(term: SelectorTerm, node: Node) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False  # an empty term matches nothing, as in Kubernetes
    for req in term.match_expressions:
        if not requirement_holds(req.operator, req.values, node.labels.get(req.key)):
            return False
    for req in term.match_fields:
        value = node.name if req.key == "metadata.name" else None
        if not requirement_holds(req.operator, req.values, value):
            return False
    return True


term_holds = _term_holds
"""One nodeSelectorTerm against a node (PV node affinity and class topologies use it too)."""


def blocking_reason(pod: Pod, node: Node) -> str | None:
    """Why the pod cannot go to the node (capacity aside), or None if it can."""
    if not node.ready:
        return "node not Ready"
    if node.unschedulable:
        return "node unschedulable"
    if node.zone is None:
        return "node has no zone label"
    for taint in node.taints:
        if taint.effect in BLOCKING_EFFECTS and not tolerates(pod.tolerations, taint):
            return f"untolerated taint {taint.key}"
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return "nodeSelector does not match"
    if pod.affinity_terms and not any(_term_holds(t, node) for t in pod.affinity_terms):
        return "required node affinity does not match"
    if pod.volumes:
        return volumes.volume_reason(pod, node)
    return None


def nodes_available(refused: Counter[str], total: int) -> str:
    """kube-scheduler's tally of why no node takes a pod: ``0/N nodes are available: ...``,
    the most common reason first."""
    parts = ", ".join(f"{count} {why}" for why, count in refused.most_common())
    return f"0/{total} nodes are available: {parts}"
