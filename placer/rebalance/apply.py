"""``rebalance --apply``: carry out one run's change list through Redis and the API server.

Failovers first (``CLUSTER FAILOVER`` on the chosen replica), then evictions, each under the
executor's safety rules (placer.rebalance.failover); with ``relabel``, the role labels the
binder reads follow Redis, in the values the deployment already uses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from models.policy import Policy
from models.snapshot import Snapshot

if TYPE_CHECKING:
    from placer.redis.access import Dialer
    from placer.redis.roles import RoleMismatch

__all__ = ["apply_changes", "label_values"]


def apply_changes(
    snapshot: Snapshot,
    policy: Policy,
    changes: list[dict[str, str]],
    *,
    adapter: Any,
    dial: Dialer,
    relabel: bool,
    role_values: Mapping[str, str],
    max_failovers: int | None,
    max_moves: int,
    failover_timeout: float,
    label_fixes: Sequence[RoleMismatch] = (),
) -> dict[str, Any]:
    """Run the change list; with ``relabel``, first make ``label_fixes`` follow Redis."""
    from placer.kube.adapter import EvictOutcome as KubeEvict
    from placer.kube.objects import label_selector, pod_serving
    from placer.rebalance.failover import (
        Action,
        EvictOutcome,
        FailoverStep,
        MoveStep,
        RebalanceExecutor,
    )
    from placer.redis import elections
    from placer.redis.ops import RedisEndpoint

    pods = {m.key: m for m in snapshot.members}

    def endpoint(pod_key: str) -> RedisEndpoint:
        found = dial(pods[pod_key])
        if found is None:
            raise click.ClickException(f"pod {pod_key} has no pod IP: cannot reach its Redis")
        return found

    now = time.time()

    def held(master: str, successor: str) -> str:
        """Why Redis's election timers, as the pods carry them, would hold the failover back."""
        return elections.cannot_stand(
            successor, pods[successor].pod.annotations, now
        ) or elections.no_votes(master, pods[master].pod.annotations, now)

    failovers = [
        FailoverStep(
            cluster=pods[c["from"]].cluster,
            shard=pods[c["from"]].shard,
            from_pod=c["from"],
            to_pod=c["to"],
            to_endpoint=endpoint(c["to"]),
            from_endpoint=endpoint(c["from"]),
            held=held(c["from"], c["to"]),
        )
        for c in changes
        if c["kind"] == "failover"
    ]

    def starting(step: FailoverStep) -> None:
        """Mark the failover under way on the master, for every replica of the guard."""
        elections.mark_failover_started(
            adapter.annotate_pod, step.from_pod, time.time(), failover_timeout
        )

    def finished(step: FailoverStep) -> None:
        elections.mark_failover_ended(adapter.annotate_pod, step.from_pod, time.time())

    def elected(step: FailoverStep) -> None:
        """Mark Redis's election timers on both pods, for the guard and the next run."""
        elections.mark_failover(
            adapter.annotate_pod, step.to_pod, step.from_pod, step.to_endpoint, time.time()
        )

    moves = [
        MoveStep(pod=c["pod"], shard_key=c["shard"], node_from=c["from"], node_to=c["to"])
        for c in changes
        if c["kind"] == "move"
    ]

    def evict(pod_key: str) -> EvictOutcome:
        ns, name = pod_key.split("/", 1)
        result = adapter.evict_pod(ns, name, pods[pod_key].pod.uid or None)
        status = {
            KubeEvict.EVICTED: "evicted",
            KubeEvict.BLOCKED: "blocked",
            KubeEvict.GONE: "gone",
        }.get(result.outcome, "error")
        return EvictOutcome(status=status, reason=result.message)

    def healthy(shard_key: str) -> int:
        """Ready, not terminating members of one shard, read from the API for that shard only."""
        namespace = shard_key.split("/", 1)[0]
        names = {m.pod.name for m in snapshot.shards.get(shard_key, ())}
        selector = label_selector(policy.selector)
        count = 0
        for obj in adapter.list_pods(namespace=namespace, label_selector=selector):
            if (obj.get("metadata") or {}).get("name") not in names:
                continue  # the shard's members keep their StatefulSet names when recreated
            if pod_serving(obj):
                count += 1
        return count

    relabel_fn: Callable[[str, str], None] | None = None
    if relabel:

        def relabel_fn(pod_key: str, role: str) -> None:
            ns, name = pod_key.split("/", 1)
            value = role_values.get(role, role)
            result = adapter.patch_pod_labels(ns, name, {policy.labels.role: value})
            if not result.ok:
                raise RuntimeError(f"{result.outcome.value} ({result.status}): {result.message}")

    executor = RebalanceExecutor(
        evict=evict,
        shard_healthy_members=healthy,
        relabel=relabel_fn,
        starting=starting,
        finished=finished,
        elected=elected,
        max_failovers=max_failovers,
        max_moves=max_moves,
        failover_timeout_s=failover_timeout,
    )
    # Labels Redis contradicts, outside any failover pair (those are relabelled after it).
    fixes: list[Action] = []
    in_failover = {f.to_pod for f in failovers} | {f.from_pod for f in failovers}
    for fix in label_fixes:
        if relabel_fn is None or fix.pod in in_failover:
            continue
        try:
            relabel_fn(fix.pod, fix.redis)
        except Exception as exc:
            outcome, reason = "failed", f"{type(exc).__name__}: {exc}"
        else:
            outcome, reason = "ok", f"label was {fix.label or 'missing'}; Redis says {fix.redis}"
        fixes.append(
            Action(
                kind="relabel",
                shard=pods[fix.pod].shard_key,
                target=fix.pod,
                destination=fix.redis,
                outcome=outcome,
                reason=reason,
            )
        )
    report = executor.run(failovers, moves)
    report.actions[:0] = fixes
    return json.loads(report.to_json())


def label_values(snapshot: Snapshot, policy: Policy) -> dict[str, str]:
    """The value the role label takes for each role, as the deployment writes it."""
    from models.identity.role_labels import role_label_values

    return role_label_values(snapshot, policy)
