"""Reporting: what the binder tells people and the cluster besides where pods go.

Events on pods (once per pod and change, not once per step), the Permit decision's log line and
metric, input problems with our own pods, the role labels audit and rebalance read, and the
plan's figures for the Scheduled event. All of it goes out through ``BackgroundWrites``, never in
the way of a binding; none of it decides anything.
"""

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from models.identity.read import solver_picks_roles
from models.kube_objects import ROLE_ANNOTATION
from models.plan import LevelVerdict, Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer.binder.background import BackgroundWrites
from placer.binder.cache import ClusterCache, PodKey, pod_key_of
from placer.binder.reading import annotations, by_key_name, labels, spec, uid
from placer.kube.adapter import EventType, KubeAdapter, PatchOutcome
from placer.metrics import Metrics
from placer.output.render import takes_text

log = logging.getLogger("placer.binder.loop")
"""Every part of the binder logs as the binder: operators filter on one logger name."""

LABEL_ATTEMPTS = 3


class Reporter:
    """Events, decision logs and role labels; remembers only what it announced, per pod."""

    def __init__(
        self,
        adapter: KubeAdapter,
        policy: Policy,
        cache: ClusterCache,
        metrics: Metrics,
        background: BackgroundWrites,
        leading: Callable[[], bool],
    ) -> None:
        self.adapter = adapter
        self.policy = policy
        self.cache = cache
        self.metrics = metrics
        self.background = background
        self.leading = leading
        self.announced: dict[PodKey, tuple[str, str]] = {}
        self.warned: set[tuple[str, str]] = set()
        """StatefulSet findings logged already: every batch reads them again."""

    # -- events --------------------------------------------------------------------------

    def event(
        self, pod: Mapping[str, Any], reason: str, message: str, type_: EventType = "Normal"
    ) -> None:
        self.background.event(pod, reason, message, type_)

    def forget(self, key: PodKey) -> None:
        """The pod was placed or is gone: a later decision about it is news again."""
        self.announced.pop(key, None)

    def note_decision(
        self,
        pods: list[PodKey],
        raw: Mapping[PodKey, dict[str, Any]],
        decision: str,
        reason: str,
        event_reason: str | None = None,
    ) -> None:
        """Count and announce a Permit decision once per pod and change, not once per step:
        one log line for the pods of one call (a shard's) it is news for. On a real API server,
        1,500 pods arriving, log lines took a tenth of the decision thread's time (py-spy), half
        of it a line per pod here."""
        news = [key for key in pods if self.announced.get(key) != (decision, reason)]
        if not news:
            return
        log.info(
            "permit pods=%s decision=%s reason=%s",
            ",".join(by_key_name(key) for key in news),
            decision,
            reason,
        )
        for key in news:
            self.announced[key] = (decision, reason)
            self.metrics.permit(decision)
            if decision == "wait":
                self.event(raw[key], "WaitingForShard", reason)
            elif decision == "reject":
                self.event(raw[key], event_reason or "FailedScheduling", reason, "Warning")

    def announce_issues(
        self, snapshot: Snapshot, raw: Mapping[PodKey, dict[str, Any]], ours: Mapping[PodKey, str]
    ) -> None:
        """Input problems with our own pods (missing labels, two masters) go on the pod; one
        with a StatefulSet (a replica count the policy's formation does not divide) is logged
        once."""
        by_object = {f"pod {name}": key for key, name in ours.items()}
        for issue in snapshot.issues:
            key = by_object.get(issue.object)
            if key is not None:
                self.note_decision([key], raw, "reject", issue.message)
            elif issue.object.startswith("statefulset ") and (
                (issue.object, issue.message) not in self.warned
            ):
                self.warned.add((issue.object, issue.message))
                log.warning("%s: %s", issue.object, issue.message)

    # -- role labels ---------------------------------------------------------------------

    def role_labels(self, pod: Mapping[str, Any], role: str) -> dict[str, str]:
        """The role label to write, if the pod does not carry the plan's role already.

        Audit and rebalance read roles from this label (or, until it is written, from the
        role annotation that rides in the same write as the node).
        """
        if not solver_picks_roles(self.policy):
            return {}  # the deployment's formation decides roles, and its own labels say them
        key = self.policy.labels.role
        current = str(labels(pod).get(key) or "").lower()
        same = current == role or (role == "replica" and current == "slave")
        return {} if same else {key: role}

    def label_unlabelled(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Queue role labels for the bound pods whose role only an annotation records (bound by
        a binder that stopped before its background writes)."""
        if not solver_picks_roles(self.policy):
            return
        role_key = self.policy.labels.role
        for pod in pods:
            role = annotations(pod).get(ROLE_ANNOTATION)
            if (
                role
                and spec(pod).get("nodeName")
                and role_key not in labels(pod)
                and self.policy.selects(labels(pod))
            ):
                self.queue_role_label(pod_key_of(pod), uid(pod), role)

    def queue_role_label(self, key: PodKey, pod_uid: str, role: str) -> None:
        self.background.call(("role", key), lambda: self.write_role_label(key, pod_uid, role, 1))

    def write_role_label(self, key: PodKey, pod_uid: str, role: str, attempt: int) -> None:
        """Label a bound pod with the role its annotation records, if it has no role label.

        The patch carries the resourceVersion it was computed from, so a label written
        meanwhile (rebalance after a failover) is never overwritten.
        """
        if not self.leading():
            return
        pod = self.cache.server_pod(key) if attempt == 1 else None
        if pod is None or not spec(pod).get("nodeName"):
            pod = self.adapter.get_pod(*key)  # the watch has not shown our write yet
        role_key = self.policy.labels.role
        if pod is None or uid(pod) != pod_uid or role_key in labels(pod):
            return
        if annotations(pod).get(ROLE_ANNOTATION) not in (None, role):
            return  # decided again since (a newer binder): its own label write follows
        version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        result = self.adapter.patch_pod_labels(key[0], key[1], {role_key: role}, version)
        if result.ok and result.pod is not None:
            self.cache.put_pod(result.pod)
        elif result.outcome is PatchOutcome.CONFLICT and attempt < LABEL_ATTEMPTS:
            self.background.call(
                ("role", key), lambda: self.write_role_label(key, pod_uid, role, attempt + 1)
            )
        elif not result.ok:
            log.warning("role label of pod %s not written: %s", by_key_name(key), result.message)


def survival_summary(verdicts: Sequence[LevelVerdict]) -> str:
    """The batch's Redis clusters through one domain's loss, per level, for the Scheduled event:
    survived or which domain takes what, and where no placement could survive, what would."""
    parts = []
    for v in verdicts:
        if v.survived:
            parts.append(f"survives losing a {v.level}")
        else:
            parts.append(f"does not survive losing a {v.level}: {takes_text(v, shown=1)}")
        parts.extend(f"no placement can survive losing a {v.level}: {n}" for n in v.cannot_survive)
    return "; ".join(parts) if parts else "survival not judged (no topology labels)"


def plan_summary(plan: Plan, seconds: float) -> str:
    """The figures behind a placement, for the Scheduled event."""
    terms = ", ".join(f"{k} {v:g}" for k, v in sorted(plan.objective_terms.items()) if v)
    worst = ", ".join(
        f"{d.level} {d.master_loss_ratio:.0%}" for d in plan.worst_domain_loss if d.level != "host"
    )
    parts = [
        f"batch solved {plan.status} in {seconds:.2f}s",
        f"objective {plan.objective:g} (bound {plan.bound:g})",
    ]
    if terms:
        parts.append(f"terms: {terms}")
    if worst:
        parts.append(f"worst single-domain master loss: {worst}")
    if plan.violations:
        parts.append(f"{len(plan.violations)} violation(s) in the cluster")
    return "; ".join(parts)
