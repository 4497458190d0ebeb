"""An input that holds nothing to judge is an error, never a healthy report.

An empty file, empty stdin (what ``kubectl get ... | redis-placer audit -f -`` sends when kubectl
fails), a List of other kinds, or a policy selector that matches no pod (a typo such as
``app: valkey``) would otherwise read as "no violations". Commands accept such an input only
with ``--allow-empty``. ``headroom`` sizes a cluster that may run no Redis pod yet: for it the
nodes alone are something to judge.
"""

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from models.errors import InputError
from models.kube_objects import TERMINAL_PHASES
from models.policy import Policy
from models.snapshot import Snapshot
from models.words import first_few

ALLOW = "pass --allow-empty to accept it"


DUMP_RESOURCES = "nodes,pods,statefulsets,pv,pvc,storageclasses"
"""Everything a snapshot is read from, as the live reader lists it (placer.inputs.live): nodes,
pods, StatefulSets (a shard's size) and volumes (where a pod's claims let it run)."""
DUMP_COMMAND = f"kubectl get {DUMP_RESOURCES} -A -o yaml"
"""The one dump command the docs, the help and the errors name."""
DUMP_HINT = f"dump them with `{DUMP_COMMAND}`"
LIVE_HINT = "may these credentials list nodes?"


def require_content(
    objects: Sequence[Mapping[str, Any]],
    snapshot: Snapshot,
    policy: Policy,
    source: str,
    hint: str = DUMP_HINT,
    *,
    need_pods: bool = True,
    namespace: str | None = None,
) -> None:
    """Raise when ``objects`` hold no Node, or (``need_pods``) no pod the policy's selector picks
    (in ``namespace``, when given)."""
    if not snapshot.nodes:
        raise InputError(f"{_no_nodes(objects, hint)}: nothing to judge; {ALLOW}", obj=source)
    if not need_pods:
        return
    pods = [o for o in objects if o.get("kind") == "Pod"]
    everywhere = [pod for pod in pods if _selected(policy, pod)]
    selected = [pod for pod in everywhere if namespace in (None, _namespace(pod))]
    if any(not _finished(pod) for pod in selected):
        _require_known_nodes(snapshot, source, hint)
        return
    selector = ", ".join(f"{k}={v}" for k, v in sorted(policy.selector.items()))
    if everywhere and not selected:
        elsewhere = sorted({_namespace(pod) for pod in everywhere})
        raise InputError(
            f"no pod the policy selector {selector} matches is in namespace {namespace!r} "
            f"({len(everywhere)} in {first_few(elsewhere, 3)}): nothing to judge; {ALLOW}",
            obj=source,
            field="--namespace",
        )
    if not pods:
        found = f"no Pod objects (only {len(snapshot.nodes)} nodes)"
    elif selected:
        found = (
            f"every pod the policy selector {selector} matches has finished "
            f"({len(selected)} Succeeded or Failed)"
        )
    else:
        found = f"no pod matches the policy selector {selector} ({len(pods)} pods read{_seen(policy, pods)})"
    raise InputError(f"{found}: nothing to judge; {ALLOW}", obj=source, field="selector")


def _require_known_nodes(snapshot: Snapshot, source: str, hint: str) -> None:
    """Redis pods bound only to nodes the input lacks: the nodes and the pods were not read
    together (two clusters, a partial dump). Judged, every shard would read as lost already."""
    bound = [m.pod.node_name for m in snapshot.members if m.pod.node_name]
    nodes = snapshot.node_by_name
    if not bound or any(name in nodes for name in bound):
        return
    missing = sorted(set(bound))
    listed = first_few(missing, 3)
    raise InputError(
        f"every Redis pod bound to a node is bound to one it does not hold ({listed}; "
        f"{hint}): nothing to judge; {ALLOW}",
        obj=source,
    )


def require_running(snapshot: Snapshot, source: str) -> None:
    """For the commands that judge what runs (audit, rebalance): a Redis pod must run."""
    if any(m.pod.node_name for m in snapshot.members):
        return
    pending = sum(1 for m in snapshot.members if m.pod.pending)
    raise InputError(
        f"no Redis pod runs yet ({pending} pending: `plan` places them): nothing to judge; {ALLOW}",
        obj=source,
    )


def _no_nodes(objects: Sequence[Mapping[str, Any]], hint: str) -> str:
    if not objects:
        return (
            "holds no objects (it is empty, or only comments)"
            if hint == DUMP_HINT
            else (f"holds no Node objects ({hint})")
        )
    kinds = Counter(str(o.get("kind")) for o in objects)
    listed = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    return f"holds no Node objects (read {listed}; {hint})"


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _namespace(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata")
    return str(meta.get("namespace") or "default") if isinstance(meta, Mapping) else "default"


def _finished(pod: Mapping[str, Any]) -> bool:
    """A pod that ran to its end: it holds no place and no role (as models.kube_objects reads it)."""
    status = pod.get("status")
    return isinstance(status, Mapping) and status.get("phase") in TERMINAL_PHASES


def _selected(policy: Policy, pod: Mapping[str, Any]) -> bool:
    return policy.selects({str(k): str(v) for k, v in _labels(pod).items()})


def _seen(policy: Policy, pods: Sequence[Mapping[str, Any]]) -> str:
    """The values the selector's keys do have, which shows a typo at once."""
    parts = []
    for key in sorted(policy.selector):
        values = Counter(str(_labels(p)[key]) for p in pods if key in _labels(p))
        if values:
            common = ", ".join(v for v, _ in values.most_common(5))
            more = f" and {len(values) - 5} more" if len(values) > 5 else ""
            parts.append(f"{key} is {common}{more}")
        else:
            parts.append(f"none has the label {key}")
    return "; " + "; ".join(parts) if parts else ""
