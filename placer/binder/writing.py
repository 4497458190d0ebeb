"""Writing: a shard's placements put on the cluster, on the enforcer's threads.

In bind mode a Binding per pod; in gate mode a pin (required node affinity) and the gate's
removal in one patch, kube-scheduler then binding. Each write's outcome goes into the cache at
once (so the next solve counts it) and a refused write re-reads the pod, so the next solve
starts from the truth. ``placer.binder.enforce`` runs these jobs; this part is what one job does.
"""

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

from models.kube_objects import BATCH_ANNOTATION, ROLE_ANNOTATION
from placer.binder.background import BackgroundWrites, LaterText, Text
from placer.binder.cache import ClusterCache, PodKey
from placer.binder.config import BinderConfig
from placer.binder.enforce import Placement, ShardJob, ShardOutcome
from placer.binder.reading import by_key_name, uid
from placer.binder.reporting import Reporter
from placer.kube.adapter import BindOutcome, KubeAdapter, PatchOutcome
from placer.metrics import Metrics

log = logging.getLogger("placer.binder.loop")
"""Every part of the binder logs as the binder: operators filter on one logger name."""


def written(placement: Placement, batch: str) -> dict[str, str]:
    """The annotations a pod's write records: the role its plan gave it, and which batch."""
    return {ROLE_ANNOTATION: placement.role, BATCH_ANNOTATION: batch}


def unknown_outcome(status: int) -> bool:
    """A write the server may have made though it did not say so: no answer (0), or an
    answer from inside it (5xx, e.g. its storage timed out after the write was sent)."""
    return status == 0 or status >= 500


def _why(role: str, shard: str, batch: Text) -> str:
    return f"{role} of shard {shard}; {batch}"


def _said(what: str, why: Text) -> str:
    return f"{what}: {why}"


def _unschedulable(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


class Writer:
    """Writes shard jobs; thread-safe as far as the cache, metrics and background writes are."""

    def __init__(
        self,
        adapter: KubeAdapter,
        config: BinderConfig,
        cache: ClusterCache,
        metrics: Metrics,
        background: BackgroundWrites,
        reporter: Reporter,
        leading: Callable[[], bool],
    ) -> None:
        self.adapter = adapter
        self.config = config
        self.cache = cache
        self.metrics = metrics
        self.background = background
        self.reporter = reporter
        self.leading = leading

    def enforce_shard(self, job: ShardJob) -> ShardOutcome:
        """Write a shard's pods in order, stopping at the first one refused.

        The order is the pods' names, the same for every binder, and each shard stops at its
        first failure: if another actor put a member where a sibling was headed, the sibling
        waits for a solve that knows it. A node that vanished or was cordoned since the solve
        stops the shard before anything goes there.
        """
        outcome = ShardOutcome(job.shard, job.batch)
        placements = job.placements
        for i, p in enumerate(placements):
            blocker = self.blocker(placements[i:])
            if blocker is not None:
                reason, why = blocker
                for rest in placements[i:]:
                    self.cache.forget_assumed(rest.key)
                    outcome.failed.append((by_key_name(rest.key), why))
                    self.metrics.bind("conflict", reason)
                log.warning("shard=%s batch=%s not written: %s", job.shard, job.batch, why)
                break
            detail = LaterText(functools.partial(_why, p.role, job.shard, job.why))
            try:
                result = self.enforce(p, job.batch, detail, outcome)
            except Exception as exc:  # whether it landed is unknown: a re-solve finds out
                log.exception("enforce pod=%s node=%s failed", by_key_name(p.key), p.node)
                self.cache.lose(f"write of {by_key_name(p.key)} failed: {exc}")
                self.cache.forget_assumed(p.key)
                outcome.failed.append((by_key_name(p.key), f"error: {type(exc).__name__}: {exc}"))
                outcome.error = exc
                result = "failed"
            if result == "failed":
                for rest in placements[i + 1 :]:
                    self.cache.forget_assumed(rest.key)
                break
        done = [(n, node) for n, node in outcome.bound if (n, node) not in outcome.found]
        if done:
            log.info(
                "placed batch=%s shard=%s mode=%s pods=%s", job.batch, job.shard,
                self.config.enforce, ",".join(f"{name}@{node}" for name, node in done),
            )  # fmt: skip
        return outcome

    def blocker(self, placements: tuple[Placement, ...]) -> tuple[str, str] | None:
        """Why these pods must not be written now, as (metric reason, message), or None."""
        if not self.leading():
            return "not_leading", "stopped: this binder no longer leads"
        nodes = self.cache.nodes
        gone = sorted({p.node for p in placements if p.node not in nodes})
        if gone:
            return "node_gone", f"node {gone[0]} is gone"
        cordoned = sorted({p.node for p in placements if _unschedulable(nodes[p.node])})
        if cordoned:
            return "node_cordoned", f"node {cordoned[0]} is cordoned"
        return None

    def enforce(
        self, p: Placement, batch: str, why: Text, outcome: ShardOutcome
    ) -> Literal["placed", "gone", "failed"]:
        key, pod, node, role = p.key, p.pod, p.node, p.role
        annotations = written(p, batch)
        if self.config.enforce == "bind":
            pod_uid = (pod.get("metadata") or {}).get("uid")
            result = self.adapter.bind_pod(key[0], key[1], pod_uid, node, annotations)
            if result.ok or (result.outcome is BindOutcome.CONFLICT and result.bound_node == node):
                # A conflict naming our node: bound already (by us, before a restart).
                self.cache.note_bound(key, node)
                self.metrics.bind("bound" if result.ok else "conflict", "already_bound")
                if self.reporter.role_labels(pod, role):
                    self.reporter.queue_role_label(key, uid(pod), role)
                return self.placed(key, pod, node, why, outcome, result.ok)
            status, message = result.status, result.message
            reason = result.outcome.value
            gone = result.outcome is BindOutcome.GONE
        else:
            version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
            patched = self.adapter.pin_and_ungate(
                key[0],
                key[1],
                node,
                self.config.gate,
                version,
                pod,
                self.reporter.role_labels(pod, role),
                annotations,
            )
            if patched.ok:
                if patched.pod is not None:
                    self.cache.settle(patched.pod)
                else:
                    self.cache.forget_assumed(key)
                self.metrics.bind("bound")
                return self.placed(key, pod, node, why, outcome, True, pinned=(role, batch))
            reason = (
                "conflict" if patched.outcome is PatchOutcome.NOT_GATED else patched.outcome.value
            )
            status, message = patched.status, patched.message
            gone = patched.outcome is PatchOutcome.GONE
        if reason == "error" and unknown_outcome(status):
            what = "binding" if self.config.enforce == "bind" else "pin"
            self.cache.lose(f"{what} of {by_key_name(key)} unanswered: {message}")
        self.cache.forget_assumed(key)
        return self.failed(key, node, reason, status, message, gone, outcome)

    def failed(
        self,
        key: PodKey,
        node: str,
        outcome_name: str,
        status: int,
        message: str,
        gone: bool,
        outcome: ShardOutcome,
    ) -> Literal["gone", "failed"]:
        """Count the failure, and re-read the pod so the next solve starts from the truth."""
        name = by_key_name(key)
        self.metrics.bind(outcome_name, f"http_{status}" if status else outcome_name)
        outcome.failed.append((name, f"{outcome_name}: {message}"))
        log.warning(
            "enforce pod=%s node=%s outcome=%s message=%s", name, node, outcome_name, message
        )
        if gone:
            self.cache.forget_pod(key)
            return "gone"
        try:
            fresh = self.adapter.get_pod(*key)
        except Exception as exc:  # the next resync or watch event brings the truth
            log.warning("re-read of pod %s failed: %s", name, exc)
            return "failed"
        if fresh is None:
            self.cache.forget_pod(key)
            return "gone"
        self.cache.put_pod(fresh)
        return "failed"

    def placed(
        self,
        key: PodKey,
        pod: Mapping[str, Any],
        node: str,
        why: Text,
        outcome: ShardOutcome,
        was_written: bool,
        pinned: tuple[str, str] | None = None,
    ) -> Literal["placed"]:
        """``pinned`` (role, batch): gate mode, where kube-scheduler binds and says Scheduled."""
        name = by_key_name(key)
        outcome.bound.append((name, node))
        if not was_written:
            outcome.found.append((name, node))
        if pinned is None:
            reason, said = "Scheduled", f"Successfully assigned {name} to {node}"
        else:
            reason, said = "Pinned", f"Pinned {name} to {node} as {pinned[0]} (batch {pinned[1]})"
        self.background.event(
            pod,
            reason,
            LaterText(functools.partial(_said, said, why)),
            supersedes=(("WaitingForShard", "Normal"), ("FailedScheduling", "Warning")),
        )
        if not was_written:
            log.info("pod=%s already bound to %s, the node this plan chose", name, node)
        return "placed"
