"""What a rebalance run did, told as Kubernetes Events: on each pod it acted on, and once on
the run's own pod (the CronJob's), so ``kubectl describe pod`` and ``kubectl get events`` show
it beside the log. An Event that cannot be written is logged and never fails the run."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from models.plan import Violation
from models.snapshot import Snapshot

log = logging.getLogger(__name__)

COMPONENT = "redis-placer-rebalance"

_REASONS = {
    ("failover", "ok"): ("FailedOver", "Normal"),
    ("relabel", "ok"): ("RoleRelabelled", "Normal"),
    ("evict", "ok"): ("EvictedForPlacement", "Normal"),
}


def _message(action: Mapping[str, Any]) -> str:
    kind, outcome, reason = action["kind"], action["outcome"], action.get("reason") or ""
    if kind == "failover":
        what = f"promoted to master over {action.get('source') or 'its master'} (CLUSTER FAILOVER)"
    elif kind == "relabel":
        what = f"role label set to {action.get('destination')}"
    else:
        what = f"evicted from {action.get('source')} to be placed on {action.get('destination')}"
    if outcome != "ok":
        what = f"{kind} {outcome}: {what}"
    return f"redis-placer rebalance: {what}" + (f"; {reason}" if reason else "")


def record_actions(adapter: Any, snapshot: Snapshot, actions: Sequence[Mapping[str, Any]]) -> int:
    """One Event per action on the pod it acted on; returns how many were written."""
    pods = {m.key: m.pod for m in snapshot.members}
    written = 0
    for action in actions:
        pod = pods.get(str(action.get("target")))
        if pod is None:
            continue
        reason, kind = _REASONS.get(
            (action["kind"], action["outcome"]),
            (
                "RebalanceSkipped" if action["outcome"] == "skipped" else "RebalanceFailed",
                "Warning",
            ),
        )
        obj = {"metadata": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}}
        written += _record(adapter, obj, reason, _message(action), kind)
    return written


def record_unanswered(adapter: Any, snapshot: Snapshot, reading: Any) -> int:
    """A Warning Event on each pod whose Redis did not answer ``CLUSTER NODES`` (a
    ``RoleReading``'s ``unreachable``): its labelled role was kept and nothing was planned
    from what it would have said. Returns how many were written."""
    pods = {m.key: m.pod for m in [*snapshot.members, *snapshot.skipped_members]}
    said = {i.object.removeprefix("pod "): i.message for i in reading.issues}
    written = 0
    for key in reading.unreachable:
        pod = pods.get(key)
        if pod is None:
            continue
        why = said.get(key, "CLUSTER NODES not read; label role kept")
        obj = {"metadata": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}}
        message = f"redis-placer rebalance: Redis did not answer: {why}"
        written += _record(adapter, obj, "RedisUnanswered", message, "Warning")
    return written


def record_run(adapter: Any, summary: str, failed: bool) -> bool:
    """One Event on the run's own pod (``POD_NAME`` / ``POD_NAMESPACE``), when it has one."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        return False
    obj = {"metadata": {"namespace": namespace, "name": name}}
    reason = "RebalanceFailed" if failed else "Rebalanced"
    return _record(adapter, obj, reason, summary, "Warning" if failed else "Normal")


def record_survival(adapter: Any, broken: Sequence[Mapping[str, Any]]) -> bool:
    """A Warning on the run's own pod for each level whose one-domain loss would take something,
    with what would mend it: an alert can match the reason."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        return False
    obj = {"metadata": {"namespace": namespace, "name": name}}
    ok = True
    for row in broken:
        message = (
            f"losing one {row['level']} would take something: {'; '.join(row['takes'][:3])}; "
            f"to mend: {row['mend']}"
        )
        ok = _record(adapter, obj, "SurvivalBroken", message, "Warning") and ok
    return ok


def _record(adapter: Any, obj: Mapping[str, Any], reason: str, message: str, kind: str) -> bool:
    try:
        return bool(adapter.record_event(obj, reason, message, kind, component=COMPONENT))
    except Exception as exc:  # an Event is a report: never the reason a run fails
        name = obj["metadata"]["name"]
        log.warning("event %s on pod %s not recorded: %s", reason, name, exc)
        return False


def run_summary(result: dict[str, Any], remaining_hard: list[Violation]) -> str:
    """One line for the run's Event: what it did and what it leaves."""
    done = Counter((a["kind"], a["outcome"]) for a in result.get("actions", []))
    parts = [
        f"{done[(kind, 'ok')]} {word}"
        for kind, word in (
            ("failover", "failovers"),
            ("evict", "evictions"),
            ("relabel", "role labels fixed"),
        )
    ]
    bad = sum(n for (_, outcome), n in done.items() if outcome != "ok")
    text = "rebalance: " + ", ".join(parts)
    if bad:
        text += f", {bad} skipped or failed"
    if "notApplied" in result:
        text = f"rebalance: nothing applied: {result['notApplied']}"
    return text + f"; {len(remaining_hard)} hard violations left"


def run_failed(result: dict[str, Any]) -> bool:
    return "notApplied" in result or any(
        a["outcome"] == "failed" for a in result.get("actions", [])
    )
