"""Execute a rebalance change list: Redis failovers first, then evictions, safely.

Kept free of Kubernetes on purpose: eviction, relabelling and shard health come in
as callables, so the safety rules here (one shard at a time, never a shard's last
healthy member, limits, PDB refusals as skips) are tested against real Redis
without an API server, and the Kubernetes side stays a thin adapter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from placer.redis.ops import (
    DEFAULT_IO_TIMEOUT_S,
    ClusterNodeInfo,
    RedisEndpoint,
    RedisOpsError,
    cluster_info,
    failover_to,
    read_cluster_nodes,
)

__all__ = [
    "Action",
    "EvictOutcome",
    "ExecutionReport",
    "FailoverStep",
    "MoveStep",
    "RebalanceExecutor",
]

log = logging.getLogger(__name__)

ActionKind = Literal["failover", "evict", "relabel"]
Outcome = Literal["ok", "skipped", "failed"]
EvictStatus = Literal["evicted", "blocked", "gone", "error"]


class _Verdict(NamedTuple):
    """Result of the pre-failover check: go ahead, already done, or skip (with why)."""

    decision: Literal["go", "done", "skip"]
    reason: str = ""
    from_node_id: str = ""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FailoverStep(_Frozen):
    """Promote ``to_pod`` (a replica) over ``from_pod`` (its master) in one shard."""

    cluster: str
    shard: str
    from_pod: str
    to_pod: str
    to_endpoint: RedisEndpoint
    from_endpoint: RedisEndpoint
    held: str = ""
    """Why Redis's election timers would hold it back now (``placer.redis.elections``): then
    it is skipped, not sent (sent, it would pause the master's writes until the timer ends)."""

    @property
    def shard_key(self) -> str:
        """``<cluster>/<shard>``; a MoveStep of the same shard must use the same key."""
        return f"{self.cluster}/{self.shard}"


class MoveStep(_Frozen):
    """Evict ``pod`` from ``node_from`` so the binder recreates it on ``node_to``."""

    pod: str
    shard_key: str
    node_from: str
    node_to: str


class EvictOutcome(_Frozen):
    """What the Kubernetes side reports for one eviction.

    ``blocked`` is a PodDisruptionBudget refusal (HTTP 429); ``gone`` means the pod
    no longer exists; ``error`` anything else. ``reason`` is shown to the user.
    """

    status: EvictStatus
    reason: str = ""


class Action(_Frozen):
    """One line of the report: what was attempted, on what, and how it ended."""

    kind: ActionKind
    shard: str
    target: str
    source: str | None = None
    destination: str | None = None
    outcome: Outcome
    reason: str = ""
    seconds: float = 0.0


class ExecutionReport(BaseModel):
    """Everything the executor did or declined to do, in order; serialises to JSON."""

    model_config = ConfigDict(extra="forbid")

    actions: list[Action] = Field(default_factory=list)
    seconds: float = 0.0

    def count(self, kind: ActionKind, outcome: Outcome) -> int:
        return sum(1 for a in self.actions if a.kind == kind and a.outcome == outcome)

    @property
    def ok(self) -> bool:
        """True when nothing failed (skips are deliberate and do not count)."""
        return all(a.outcome != "failed" for a in self.actions)

    def to_json(self) -> str:
        return self.model_dump_json()


@dataclass
class RebalanceExecutor:
    """Applies failovers, then evictions, under the rebalance safety rules.

    - Failovers run one at a time, shard by shard, each waited for until settled.
      A failed or stale step stops the rest of that shard (its failovers and its
      evictions); other shards continue.
    - Before each failover the target's own view of the cluster must show it as a
      replica of ``from``'s node, with ``cluster_state:ok``; otherwise it is skipped.
      A step that is already done (roles already swapped) is skipped, so re-runs are safe.
    - Evictions: at most ``max_moves`` performed, never a shard's last healthy member,
      one member of a shard at a time (a second member waits up to
      ``settle_timeout_s`` for the first to be replaced, else waits for the next run).
      A PodDisruptionBudget refusal is a skip with its reason, not an error.
    """

    evict: Callable[[str], EvictOutcome]
    shard_healthy_members: Callable[[str], int]
    relabel: Callable[[str, str], None] | None = None
    starting: Callable[[FailoverStep], None] | None = None
    """Told just before each failover is sent: the guard lets no member of its shard stop
    while it is under way."""
    finished: Callable[[FailoverStep], None] | None = None
    """Told just after each failover sent, whatever came of it."""
    elected: Callable[[FailoverStep], None] | None = None
    """Told of each failover sent (performed or failed): Redis's election timers start."""
    max_failovers: int | None = None
    max_moves: int = 1
    failover_timeout_s: float = 30.0
    poll_s: float = 0.1
    io_timeout_s: float = DEFAULT_IO_TIMEOUT_S
    settle_timeout_s: float = 0.0

    def run(self, failovers: Sequence[FailoverStep], moves: Sequence[MoveStep]) -> ExecutionReport:
        """Execute the change list and report every step; never raises for a step."""
        started = time.monotonic()
        report = ExecutionReport()
        blocked: dict[str, str] = {}  # shard_key -> why its remaining steps are skipped
        self._run_failovers(failovers, report, blocked)
        self._run_moves(moves, report, blocked)
        report.seconds = round(time.monotonic() - started, 3)
        return report

    # -- failovers ----------------------------------------------------------------

    def _run_failovers(
        self, steps: Sequence[FailoverStep], report: ExecutionReport, blocked: dict[str, str]
    ) -> None:
        by_shard: dict[str, list[FailoverStep]] = {}
        for step in steps:
            by_shard.setdefault(step.shard_key, []).append(step)
        attempted = 0
        for shard_key, shard_steps in by_shard.items():
            for step in shard_steps:
                if shard_key in blocked:
                    self._record(report, _failover_action(step, "skipped", blocked[shard_key]))
                    continue
                if step.held:
                    blocked[shard_key] = "its failover waits for Redis's election timers"
                    self._record(report, _failover_action(step, "skipped", step.held))
                    continue
                if self.max_failovers is not None and attempted >= self.max_failovers:
                    why = f"max-failovers limit ({self.max_failovers}) reached"
                    self._record(report, _failover_action(step, "skipped", why))
                    blocked[shard_key] = "its failover was deferred by max-failovers"
                    continue
                t0 = time.monotonic()
                try:
                    verdict = self._verify(step)
                except Exception as exc:  # one bad step must not abort the run
                    blocked[shard_key] = "an earlier failover step of this shard failed"
                    why = f"pre-check: {_describe(exc)}"
                    self._record(report, _failover_action(step, "failed", why, t0))
                    continue
                if verdict.decision == "done":
                    self._record(report, _failover_action(step, "skipped", verdict.reason, t0))
                    self._relabel_pair(step, report)
                    continue
                if verdict.decision == "skip":
                    blocked[shard_key] = "an earlier failover step of this shard was stale"
                    self._record(report, _failover_action(step, "skipped", verdict.reason, t0))
                    continue
                attempted += 1
                self._tell(self.starting, step, "before")
                try:
                    result = failover_to(
                        step.to_endpoint,
                        self.failover_timeout_s,
                        self.poll_s,
                        expected_master_id=verdict.from_node_id,
                        old_master_endpoint=step.from_endpoint,
                        io_timeout_s=self.io_timeout_s,
                    )
                except Exception as exc:
                    self._tell(self.finished, step, "after")
                    blocked[shard_key] = "an earlier failover step of this shard failed"
                    self._record(report, _failover_action(step, "failed", _describe(exc), t0))
                    self._tell(self.elected, step, "after")
                    continue
                self._tell(self.finished, step, "after")
                if result.performed:
                    self._tell(self.elected, step, "after")
                why = "promoted" if result.performed else "already master"
                self._record(report, _failover_action(step, "ok", why, t0))
                self._relabel_pair(step, report)

    @staticmethod
    def _tell(
        listener: Callable[[FailoverStep], None] | None, step: FailoverStep, when: str
    ) -> None:
        if listener is None:
            return
        try:
            listener(step)
        except Exception as exc:  # the marks are advice; the failover goes on
            log.warning("%s the failover of %s: %s", when, step.shard_key, _describe(exc))

    def _verify(self, step: FailoverStep) -> _Verdict:
        """Check the step still matches the cluster, from the target's own view."""
        nodes = read_cluster_nodes(step.to_endpoint, self.io_timeout_s)
        me = next((n for n in nodes if n.myself), None)
        source = _find_node(nodes, step.from_endpoint)
        where = f"as seen from {step.to_endpoint.address}"
        if me is None:
            return _Verdict("skip", f"{step.to_endpoint.address} did not report itself")
        if source is None:
            why = f"{step.from_pod} ({step.from_endpoint.address}) is not a cluster node {where}"
            return _Verdict("skip", why)
        if me.role == "master" and source.role == "replica" and source.master_id == me.node_id:
            why = f"already done: {step.to_pod} is master, {step.from_pod} its replica"
            return _Verdict("done", why, source.node_id)
        if me.role != "replica" or me.master_id != source.node_id:
            actual = f"a replica of {me.master_id}" if me.role == "replica" else f"a {me.role}"
            why = (
                f"stale plan: {step.to_pod} is {actual}, not a replica of "
                f"{step.from_pod} ({source.node_id}) {where}"
            )
            return _Verdict("skip", why)
        state = cluster_info(step.to_endpoint, self.io_timeout_s).get("cluster_state")
        if state != "ok":
            why = f"cluster_state is {state} {where}; no failover in a degraded cluster"
            return _Verdict("skip", why)
        return _Verdict("go", "", source.node_id)

    def _relabel_pair(self, step: FailoverStep, report: ExecutionReport) -> None:
        """Make the role labels follow Redis; a failure is recorded, not fatal."""
        if self.relabel is None:
            return
        for pod, role in ((step.to_pod, "master"), (step.from_pod, "replica")):
            t0 = time.monotonic()
            try:
                self.relabel(pod, role)
            except Exception as exc:
                action = Action(
                    kind="relabel",
                    shard=step.shard_key,
                    target=pod,
                    destination=role,
                    outcome="failed",
                    reason=f"{type(exc).__name__}: {exc}",
                    seconds=_since(t0),
                )
            else:
                action = Action(
                    kind="relabel",
                    shard=step.shard_key,
                    target=pod,
                    destination=role,
                    outcome="ok",
                    seconds=_since(t0),
                )
            self._record(report, action)

    # -- evictions ------------------------------------------------------------------

    def _run_moves(
        self, moves: Sequence[MoveStep], report: ExecutionReport, blocked: dict[str, str]
    ) -> None:
        evicted = 0
        # shard_key -> healthy members seen just before this run's eviction there
        disrupted: dict[str, int] = {}
        for move in moves:
            if move.shard_key in blocked:
                why = f"not evicting: {blocked[move.shard_key]}"
                self._record(report, _move_action(move, "skipped", why))
                continue
            if evicted >= self.max_moves:
                why = f"max-moves limit ({self.max_moves}) reached"
                self._record(report, _move_action(move, "skipped", why))
                continue
            t0 = time.monotonic()
            try:
                healthy = self._healthy_after_settle(move.shard_key, disrupted)
            except Exception as exc:
                why = f"cannot tell shard health: {type(exc).__name__}: {exc}"
                self._record(report, _move_action(move, "failed", why, t0))
                continue
            if move.shard_key in disrupted and healthy < disrupted[move.shard_key]:
                why = (
                    "another member of this shard was evicted in this run and is not "
                    "back yet; one member at a time"
                )
                self._record(report, _move_action(move, "skipped", why, t0))
                continue
            if healthy <= 1:
                why = f"shard has {healthy} healthy member(s); never evict the last one"
                self._record(report, _move_action(move, "skipped", why, t0))
                continue
            try:
                outcome = self.evict(move.pod)
            except Exception as exc:
                outcome = EvictOutcome(status="error", reason=f"{type(exc).__name__}: {exc}")
            if outcome.status == "evicted":
                evicted += 1
                disrupted[move.shard_key] = healthy
                why = outcome.reason or f"evicted; to be recreated on {move.node_to}"
                self._record(report, _move_action(move, "ok", why, t0))
            elif outcome.status == "blocked":
                why = f"PodDisruptionBudget refused the eviction: {outcome.reason or 'HTTP 429'}"
                self._record(report, _move_action(move, "skipped", why, t0))
            elif outcome.status == "gone":
                why = f"pod no longer exists{': ' + outcome.reason if outcome.reason else ''}"
                self._record(report, _move_action(move, "skipped", why, t0))
            else:
                why = f"eviction failed: {outcome.reason or 'unknown error'}"
                self._record(report, _move_action(move, "failed", why, t0))

    def _healthy_after_settle(self, shard_key: str, disrupted: dict[str, int]) -> int:
        """Healthy members now; after an eviction in this shard, wait (bounded) for recovery."""
        healthy = self.shard_healthy_members(shard_key)
        if shard_key not in disrupted:
            return healthy
        deadline = time.monotonic() + self.settle_timeout_s
        while healthy < disrupted[shard_key] and time.monotonic() < deadline:
            time.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())))
            healthy = self.shard_healthy_members(shard_key)
        return healthy

    # -- reporting ------------------------------------------------------------------

    @staticmethod
    def _record(report: ExecutionReport, action: Action) -> None:
        """Append to the report and log one structured line per decision."""
        report.actions.append(action)
        level = logging.WARNING if action.outcome == "failed" else logging.INFO
        log.log(
            level,
            "rebalance action=%s shard=%s target=%s outcome=%s seconds=%.3f reason=%s",
            action.kind,
            action.shard,
            action.target,
            action.outcome,
            action.seconds,
            action.reason,
        )


def _find_node(nodes: list[ClusterNodeInfo], endpoint: RedisEndpoint) -> ClusterNodeInfo | None:
    """The node announced at ``endpoint`` (by IP or announced hostname, and port)."""
    for node in nodes:
        if node.port == endpoint.port and endpoint.host in (node.ip, node.hostname):
            return node
    return None


def _describe(exc: Exception) -> str:
    """Our Redis errors are already one clear line; anything else gets its type name."""
    return str(exc) if isinstance(exc, RedisOpsError) else f"{type(exc).__name__}: {exc}"


def _since(t0: float | None) -> float:
    return 0.0 if t0 is None else round(time.monotonic() - t0, 3)


def _failover_action(
    step: FailoverStep, outcome: Outcome, reason: str, t0: float | None = None
) -> Action:
    return Action(
        kind="failover",
        shard=step.shard_key,
        target=step.to_pod,
        source=step.from_pod,
        outcome=outcome,
        reason=reason,
        seconds=_since(t0),
    )


def _move_action(move: MoveStep, outcome: Outcome, reason: str, t0: float | None = None) -> Action:
    return Action(
        kind="evict",
        shard=move.shard_key,
        target=move.pod,
        source=move.node_from,
        destination=move.node_to,
        outcome=outcome,
        reason=reason,
        seconds=_since(t0),
    )
