"""Gate mode: pins that kube-scheduler refuses, noticed within seconds and never left stuck.

kube-scheduler reports a pod it cannot bind through the pod's ``PodScheduled`` condition
(``False``, reason ``Unschedulable``, with its per-node tally as the message; its
``FailedScheduling`` Event says the same). The binder watches pods, so it sees that condition on
a pod it pinned as soon as kube-scheduler writes it.

Kubernetes lets a pod's node affinity change only while the pod still has a scheduling gate
(tightening only), and a gate cannot be added back: once the binder has lifted its gate, the pin
it set can no longer be moved. What can move is the pod itself: a pod that never started and has
a controller (a StatefulSet, ...) is deleted (uid and resourceVersion preconditions), its
controller recreates it with the gate, and the binder solves its shard again with the refused
node excluded and pins it there. That needs ``--recreate-refused`` and the RBAC of
deploy/components/recreate-refused; without it the binder says, on the pod, what was refused and
what to do. Refused nodes are remembered per pod name for ``REMEMBER_SECONDS``.
"""

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

from models.kube_objects import BATCH_ANNOTATION
from placer.binder.cache import PodKey, pod_key_of
from placer.kube.adapter import KubeAdapter
from placer.kube.objects import NODE_NAME_FIELD

log = logging.getLogger(__name__)

REMEMBER_SECONDS = 600.0
"""How long a refused node stays excluded for the pod of that name (and its replacement)."""
Event = Callable[[Mapping[str, Any], str, str], None]


def scheduler_refusal(pod: Mapping[str, Any]) -> str | None:
    """kube-scheduler's message when it reports the pod unschedulable, else None."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return str(cond.get("message") or "no reason given")
    return None


def _controlled(pod: Mapping[str, Any]) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("controller") for o in owners)


class Refusals:
    """Nodes kube-scheduler refused for pods the binder pinned, and what was done about it."""

    def __init__(
        self,
        adapter: KubeAdapter,
        event: Event,
        recreate: bool,
        clock: Callable[[], float],
    ) -> None:
        self.adapter = adapter
        self.event = event
        self.recreate = recreate
        self.clock = clock
        self.refused: dict[PodKey, dict[str, float]] = {}
        self._handled: set[tuple[str, str]] = set()

    def observe(self, pod: Mapping[str, Any], pin: str) -> bool:
        """Act on a pinned pod that kube-scheduler refused; True when it was refused."""
        message = scheduler_refusal(pod)
        meta = pod.get("metadata") or {}
        if message is None or BATCH_ANNOTATION not in (meta.get("annotations") or {}):
            return False
        uid = str(meta.get("uid") or "")
        if (uid, pin) in self._handled:
            return True
        self._handled.add((uid, pin))
        key = pod_key_of(pod)
        self.refused.setdefault(key, {})[pin] = self.clock()
        name = f"{key[0]}/{key[1]}"
        log.warning("refused pod=%s node=%s message=%s", name, pin, message)
        said = f"kube-scheduler refused the pin to {pin} ({message})"
        if not self.recreate or not _controlled(pod):
            self.event(
                pod,
                "PinRefused",
                f"{said}; a pod's node affinity cannot change once its scheduling gate is "
                "lifted: delete the pod so that its controller recreates it (the binder then "
                f"places it avoiding {pin}), or run the binder with --recreate-refused",
            )
            return True
        version = str(meta.get("resourceVersion") or "")
        if self.adapter.delete_pod(key[0], key[1], uid=uid, resource_version=version):
            self.event(
                pod,
                "Repinning",
                f"{said}; the pin cannot move once the gate is lifted, so the pod is deleted "
                f"for its controller to recreate, and its shard is solved again without {pin}",
            )
        return True

    def excluded(self, key: PodKey) -> list[str]:
        """Nodes refused for the pod of this name lately."""
        now = self.clock()
        nodes = self.refused.get(key, {})
        for node in [n for n, at in nodes.items() if now - at > REMEMBER_SECONDS]:
            del nodes[node]
        return sorted(nodes)

    def without_refused(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The pod as the solver should see it: its refused nodes excluded (a copy), or itself."""
        nodes = self.excluded(pod_key_of(pod))
        if not nodes:
            return pod
        out = copy.deepcopy(pod)
        meta = out.setdefault("metadata", {})
        meta["resourceVersion"] = f"{meta.get('resourceVersion', '')}-without-{'-'.join(nodes)}"
        spec = out.setdefault("spec", {})
        affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = required.get("nodeSelectorTerms") or [{}]
        away = {"key": NODE_NAME_FIELD, "operator": "NotIn", "values": nodes}
        for term in terms:
            term.setdefault("matchFields", []).append(away)
        required["nodeSelectorTerms"] = terms
        return out
