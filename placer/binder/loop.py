"""The Permit-gate binder: hold pending Redis pods until their shard is whole, solve, enforce.

One ``step`` is one decision: read the cache, decide per shard (``placer.binder.permit``), solve
the oldest ready shards in one call with the running pods fixed, and hand the plan to the
enforcer (``placer.binder.enforce``: a Binding per pod in bind mode; a pin and the gate's
removal in gate mode), which writes up to ``concurrency`` shards at once. ``step`` waits for its
writes; ``run`` does not: it solves the next batch while the last one is being bound, every
decided pod already counted on its node in the cache. Batches are sized by the solver's measured
speed (``placer.binder.batching``). Events and role labels go out in the background
(``placer.binder.background``), never in the way of a binding. Nothing is remembered that the
cluster does not hold except backoff timers and event de-duplication, so a restarted binder
carries on where the cluster is.
"""

import itertools
import logging
import secrets
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from models.cluster import Pod
from models.errors import InputError
from models.identity.expected import expected_members
from models.identity.read import solver_picks_roles
from models.kube_objects import BATCH_ANNOTATION, ROLE_ANNOTATION, ParseCache, build_snapshot
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer.binder.background import DEFAULT_QPS, BackgroundWrites
from placer.binder.batching import BatchSizer
from placer.binder.cache import ClusterCache, PodKey, pod_key_of
from placer.binder.enforce import Enforcer, Placement, ShardJob, ShardOutcome
from placer.binder.pdbs import PdbManager
from placer.binder.permit import PermitDecision, decide, gangs
from placer.binder.refusals import Refusals
from placer.binder.volumes import volume_epoch, volume_inputs
from placer.kube.adapter import BindOutcome, EventType, KubeAdapter, PatchOutcome
from placer.kube.objects import NODE_NAME_FIELD, gate_names
from placer.metrics import Metrics
from solver.greedy import greedy_plan
from solver.solve import SolveOptions, solve
from solver.warm import Warm

log = logging.getLogger(__name__)

Enforce = Literal["bind", "gate"]
PLACEMENT_GATE = "redis-placer.io/placement"
DEFAULT_BINDER_TIME_LIMIT = 5.0
"""Per-batch solve budget of ``redis-placer binder`` (docs/benchmarks.md has the trade-off)."""
DEFAULT_CONCURRENCY = 16
"""Shards written at once (one request in flight each), as kube-scheduler binds in parallel."""
DEFAULT_BATCH_SECONDS = 0.5
"""How long one batch's solve should take: the first shards bind about this soon."""
DEFAULT_MAX_BATCH_PODS = 600
DEFAULT_RELATIVE_GAP = 0.01
"""A batch's solve stops once its placement is proven within 1% of the best possible: proving
the last fraction of a percent took most of a 5 s budget on batches of a hundred shards."""
FIRST_SECONDS_PER_POD = {"cp-sat": 0.005, "greedy": 0.002}
"""What a pending pod costs the solver, until its own solves say (then an average of them): a
first batch of about 100 pods for CP-SAT, where a solve's fixed cost is not paid for a handful
(docs/benchmarks.md, On a real API server)."""
IDLE_SECONDS = 30.0
"""Longest sleep between steps when nothing wakes the binder (a watch event does)."""
STEP_INTERVAL = 0.1
"""Shortest time between two steps that a watch event starts: a step rebuilds the snapshot of
the whole cluster, and a rollout's pods arrive faster than that is worth doing."""
LABEL_ATTEMPTS = 3


@dataclass(frozen=True)
class BinderConfig:
    enforce: Enforce = "bind"
    gate: str = PLACEMENT_GATE
    namespace: str | None = None
    """Watch one namespace only; None watches all (capacity needs every pod on a node)."""
    solver: Literal["cp-sat", "greedy"] = "cp-sat"
    time_limit: float | None = None
    """Per-solve limit; None uses the policy's solver.timeLimitSeconds."""
    retry_base_seconds: float = 1.0
    retry_max_seconds: float = 60.0
    node_refresh_seconds: float = 30.0
    """How often StatefulSets (and, without a node watch, nodes) are listed again."""
    concurrency: int = DEFAULT_CONCURRENCY
    batch_seconds: float = DEFAULT_BATCH_SECONDS
    max_batch_pods: int = DEFAULT_MAX_BATCH_PODS
    relative_gap: float | None = None
    """CP-SAT stops within this share of its bound; None uses the policy's solver.relativeGap."""
    event_qps: float = DEFAULT_QPS
    manage_pdbs: bool = False
    """Create a PodDisruptionBudget for each shard placed, delete it with the shard."""
    recreate_refused: bool = False
    """Gate mode: delete a never-started pod whose pin kube-scheduler refused (refusals.py)."""


@dataclass
class StepReport:
    """What one step decided and did, for logs, tests and the benchmark."""

    decisions: list[PermitDecision] = field(default_factory=list)
    solved_pods: int = 0
    solve_status: str | None = None
    batch: str | None = None
    bound: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    unplaced: list[tuple[str, str]] = field(default_factory=list)
    next_step_in: float = IDLE_SECONDS


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pinned_node(pod: Mapping[str, Any]) -> str | None:
    """The node a pending pod is pinned to by a required ``metadata.name`` field affinity.

    In gate mode a pinned, ungated pod waits for kube-scheduler to bind it; until then it
    must still count on its node, or the next batch would hand its room to someone else.
    """
    required = ((_spec(pod).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    nodes: set[str] = set()
    terms = required.get("nodeSelectorTerms") or []
    for term in terms:
        names = [
            tuple(f.get("values") or ())
            for f in term.get("matchFields") or []
            if f.get("key") == NODE_NAME_FIELD and f.get("operator") == "In"
        ]
        if len(names) != 1 or len(names[0]) != 1:
            return None
        nodes.add(str(names[0][0]))
    return nodes.pop() if len(nodes) == 1 else None


def _created(pod: Mapping[str, Any]) -> float | None:
    raw = (pod.get("metadata") or {}).get("creationTimestamp")
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Binder:
    """The decision loop. ``step`` is synchronous and deterministic given the cache and ``now``."""

    def __init__(
        self,
        adapter: KubeAdapter,
        policy: Policy,
        config: BinderConfig | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.adapter = adapter
        self.policy = policy
        self.config = config or BinderConfig()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.cache = ClusterCache(adapter, self.config.namespace)
        self.pdbs = (
            PdbManager(adapter, policy, self.config.enforce, self.config.namespace)
            if self.config.manage_pdbs
            else None
        )
        self.parse_cache = ParseCache()
        self.warm = Warm(self.policy)
        self.refusals = Refusals(adapter, self._event, self.config.recreate_refused, clock)
        self._lists_volumes = False
        self.enforcer = Enforcer(self.config.concurrency)
        self.background = BackgroundWrites(
            adapter,
            qps=self.config.event_qps,
            busy=lambda: self.enforcer.busy,
            on_drop=lambda kind: self.metrics.deferred_dropped.labels(kind=kind).inc(),
        )
        self.sizer = BatchSizer(
            target_seconds=self.config.batch_seconds,
            max_pods=self.config.max_batch_pods,
            seconds_per_pod=FIRST_SECONDS_PER_POD[self.config.solver],
        )
        self.run_id = secrets.token_hex(4)
        """Names this process's batches (``<run_id>-<n>``) in logs and pod annotations."""
        self._batches = itertools.count(1)
        self._leading: Callable[[], bool] = lambda: True
        self._owners_sought: set[tuple[str, str]] = set()
        self._sets_read_at = float("-inf")
        self.follow_nodes = False
        """True while a node watch keeps the cache's nodes current (``run`` starts one); a
        caller that steps by hand gets a fresh node list before every batch instead."""
        self._nodes_read_at = float("-inf")
        self._retry: dict[str, tuple[int, float]] = {}
        self._in_flight: set[str] = set()
        """Shards handed to the enforcer whose outcome has not come back yet."""
        self._window_opened: float | None = None
        self._noticed: dict[str, float] = {}
        """Ready shards by when a step first found them ready: batches take the oldest first."""
        self._first_seen: dict[PodKey, float] = {}
        self._announced: dict[PodKey, tuple[str, str]] = {}
        self._last_read: (
            tuple[tuple[int, int], tuple[Snapshot, dict[PodKey, str], dict[PodKey, dict[str, Any]]]]
            | None
        ) = None
        self.reads = 0
        self.read_seconds = 0.0
        """How often, and for how long in all, the snapshot was rebuilt (logged per solve)."""

    # -- which pods are ours -------------------------------------------------------------

    def managed(self, pod: Mapping[str, Any]) -> bool:
        return self.policy.selects(_labels(pod))

    def is_ours(self, pod: Mapping[str, Any]) -> bool:
        """A pending managed pod this binder must place, by the enforcement mode's marker."""
        spec = _spec(pod)
        if spec.get("nodeName") or _deleting(pod) or _terminal(pod) or not self.managed(pod):
            return False
        gates = gate_names(pod)
        if self.config.enforce == "gate":
            return self.config.gate in gates
        return spec.get("schedulerName") == self.policy.scheduler_name and not gates

    def has_work(self) -> bool:
        """Pods of ours pending, or writes of ours in flight: what a binder without leader
        election takes the Lease for."""
        if self.enforcer.busy:
            return True
        return any(self.is_ours(p) for p in self.cache.objects()[1])

    # -- one decision --------------------------------------------------------------------

    def step(self, now: float | None = None) -> StepReport:
        """Decide, solve and enforce once, and return when every write of this step is done."""
        now = self.clock() if now is None else now
        report = self._plan(now)
        self.enforcer.wait()
        errors = self._finish(report, now)
        self._reconcile_pdbs(now)
        self.background.flush()
        if errors:
            raise errors[0]  # a caller stepping by hand sees what stopped a shard
        return report

    def _reconcile_pdbs(self, now: float) -> None:
        """``--manage-pdbs``: a PodDisruptionBudget for each shard placed, gone with it."""
        if self.pdbs is not None:
            self.pdbs.reconcile(self._read()[0], self.cache.statefulsets, now)

    def _plan(self, now: float, streaming: bool = False) -> StepReport:
        """Decide, and if a batch is due, solve it and hand it to the enforcer (no waiting).

        A batch is due when the batch window has passed since shards became ready, when they
        make a full batch, or, while ``streaming`` (batches are still being solved or bound),
        as soon as the enforcer has started on everything it was given: collecting longer
        would leave it idle.
        """
        report = StepReport()
        every = self.config.node_refresh_seconds
        if not self.cache.synced:
            self._resync()
            self._nodes_read_at = self._sets_read_at = now
        else:
            if not self.follow_nodes and now - self._nodes_read_at >= every:
                self.cache.refresh_nodes()
                self._nodes_read_at = now
            if now - self._sets_read_at >= every:
                self.cache.refresh_statefulsets()  # a scaled StatefulSet changes a shard's size
                self._sets_read_at = now
        snapshot, ours, raw = self._read()
        self.metrics.pending_pods.set(len(ours))
        self.metrics.gated_pods.set(
            sum(1 for p in raw.values() if self.config.gate in gate_names(p))
        )
        self._announce_issues(snapshot, raw, ours)
        waited = {name: now - self._arrival(k, raw[k], now) for k, name in ours.items()}
        shard_gangs = gangs(snapshot, set(ours.values()), waited)
        decisions = [decide(g, self.policy.permit) for g in shard_gangs]
        waiting_shards = {g.shard for g in shard_gangs}
        for shard in [s for s in self._retry if s not in waiting_shards | self._in_flight]:
            del self._retry[shard]  # placed (or gone) since: a later pod starts afresh
        report.decisions = decisions
        ready: list[str] = []
        wake = [IDLE_SECONDS]
        key_of = {name: key for key, name in ours.items()}
        members_by_shard = {g.shard: [key_of[p] for p in g.pending] for g in shard_gangs}
        for d in decisions:
            pods = members_by_shard.get(d.shard, [])
            if d.decision != "allow":
                self._note_decision(pods, raw, d.decision, d.reason)
                if d.recheck_in is not None:
                    wake.append(d.recheck_in)
                continue
            not_before = self._retry.get(d.shard, (0, now))[1]
            if not_before > now:
                wake.append(not_before - now)
                continue
            if d.shard in self._in_flight:
                continue  # its other members are being written: wait for that outcome
            ready.append(d.shard)
        self._noticed = {s: self._noticed.get(s, now) for s in ready}
        report.next_step_in = max(0.0, min(wake))
        if not ready:
            self._window_opened = None
            return report
        ready.sort(key=lambda s: (self._noticed[s], s))  # the longest ready first
        wanted = self.sizer.pods
        ready_pods = sum(len(members_by_shard[s]) for s in ready)
        if self._window_opened is None:
            self._window_opened = now
        remaining = self.policy.permit.batch_window_seconds - (now - self._window_opened)
        keeps_busy = streaming and self.enforcer.backlog_pods == 0
        # A shard created member by member gets no company by waiting: its next member comes
        # only once this one runs, so a window would only hold up the whole chain.
        ordered = {g.shard for g in shard_gangs if g.ordered}
        only_ordered = all(s in ordered for s in ready)
        if ready_pods < wanted and remaining > 0 and not keeps_busy and not only_ordered:
            # Collect shards for the window, unless a full batch is there already, or the
            # pipeline is moving and the enforcer is about to run out of work: those shards
            # have waited behind the last batch, and more waiting would leave it idle.
            report.next_step_in = min(report.next_step_in, remaining)
            return report
        if self.enforcer.backlog_pods >= wanted:
            return report  # a whole batch still waits for the enforcer; its outcomes wake us
        self._window_opened = None
        if keeps_busy and ready_pods > wanted:
            # The solver is behind: more shards wait than a batch of the target time holds.
            # Fewer, larger batches drain them sooner (each solve has a fixed cost), as large
            # as the solver has handled well in its budget.
            wanted = max(wanted, self.sizer.most)
        batch: list[str] = []
        count = 0
        for shard in ready:
            if batch and count + len(members_by_shard[shard]) > wanted:
                break
            batch.append(shard)
            count += len(members_by_shard[shard])
        for shard in batch:
            self._note_decision(members_by_shard[shard], raw, "allow", "")
            self._noticed.pop(shard, None)
        self._solve_and_submit(snapshot, batch, ours, raw, now, report)
        if len(batch) < len(ready):
            report.next_step_in = 0.0  # more shards are ready: the next batch now
        return report

    def _finish(self, report: StepReport, now: float) -> list[BaseException]:
        """Take in the shards the enforcer finished: retry the incomplete ones at once."""
        errors: list[BaseException] = []
        for outcome in self.enforcer.completed():
            if outcome.error is not None:
                errors.append(outcome.error)
            self._in_flight.discard(outcome.shard)
            report.bound.extend(outcome.bound)
            report.failed.extend(outcome.failed)
            for name, _ in outcome.bound:
                namespace, _, pod = name.partition("/")
                self._announced.pop((namespace, pod), None)
            if outcome.complete:
                self._retry.pop(outcome.shard, None)
            else:
                self._backoff(outcome.shard, now, immediate=True)
        if report.failed:
            report.next_step_in = 0.0
        else:
            retries = [t - now for _, t in self._retry.values() if t > now]  # past ones: no spin
            report.next_step_in = max(0.0, min([report.next_step_in, *retries]))
        return errors

    def _resync(self) -> None:
        """List everything again, and label the pods whose role only an annotation records
        (bound by a binder that stopped before its background writes)."""
        self.cache.resync()
        if not solver_picks_roles(self.policy):
            return
        role_key = self.policy.labels.role
        for pod in self.cache.objects()[1]:
            annotations = _annotations(pod)
            role = annotations.get(ROLE_ANNOTATION)
            if (
                role
                and _spec(pod).get("nodeName")
                and role_key not in _labels(pod)
                and self.managed(pod)
            ):
                self._queue_role_label(pod_key_of(pod), _uid(pod), role)

    def _read(self) -> tuple[Snapshot, dict[PodKey, str], dict[PodKey, dict[str, Any]]]:
        """The snapshot this decision works on, and which pending pods are ours.

        Rebuilt only when the cache changed since the last step: a batch window's steps mostly
        look at the same cluster, and 15,000 pods are not re-read to learn nothing.
        """
        generation = (self.cache.generation, volume_epoch(self._lists_volumes, time.monotonic()))
        if self._last_read is not None and self._last_read[0] == generation:
            return self._last_read[1]
        started = time.monotonic()
        result = self._build()
        self.reads += 1
        self.read_seconds += time.monotonic() - started
        self._last_read = (generation, result)
        return result

    def _build(self) -> tuple[Snapshot, dict[PodKey, str], dict[PodKey, dict[str, Any]]]:
        """Objects that do not parse are left out with a log line (and an event on our own
        pods) rather than stopping the binder: one bad pod must not hold up every shard."""
        nodes, pods, statefulsets = self.cache.objects()
        objects: list[Mapping[str, Any]] = []
        for node in nodes:
            try:
                self.parse_cache.node(node, self.policy, [])
            except InputError as exc:
                log.warning("node skipped: %s", exc)
                continue
            objects.append(node)
        ours: dict[PodKey, str] = {}
        raw: dict[PodKey, dict[str, Any]] = {}
        unreadable: dict[PodKey, str] = {}
        for pod in pods:
            key = pod_key_of(pod)
            mine = self.is_ours(pod)
            try:
                self.parse_cache.pod(pod)
            except InputError as exc:
                if mine:
                    raw[key] = pod
                    unreadable[key] = f"cannot read the pod: {exc}"
                log.warning("pod skipped: %s", exc)
                continue
            if mine:
                ours[key] = f"{key[0]}/{key[1]}"
                raw[key] = pod
                objects.append(self.refusals.without_refused(pod))
            elif not _spec(pod).get("nodeName") and self.managed(pod):
                pin = pinned_node(pod) if self.config.gate not in gate_names(pod) else None
                if pin is not None and not self.refusals.observe(pod, pin):
                    objects.append({**pod, "spec": {**_spec(pod), "nodeName": pin}})
                # Otherwise another scheduler's pending pod: not ours to place or count.
            else:
                objects.append(pod)
        parsed = [self.parse_cache.pod(raw[k]) for k in ours]  # parsed above: cache hits
        unknown = _unknown_owners(parsed, statefulsets) - self._owners_sought
        if unknown:
            self._owners_sought |= unknown  # one extra list per new owner, not one per step
            # A StatefulSet newer than our list: its replicas are the shard's size, and
            # without them the shard would be placed before all its members arrive.
            self.cache.refresh_statefulsets()
            statefulsets = self.cache.objects()[2]
        objects.extend(statefulsets)
        volumes, refused = volume_inputs(self.adapter, parsed, self.config.enforce == "bind")
        self._lists_volumes = bool(volumes)
        if refused:  # bind mode binds no volume: such pods are refused, and left out
            objects = [o for o in objects if o.get("kind") != "Pod" or pod_key_of(o) not in refused]
            unreadable.update({k: why for k, why in refused.items() if ours.pop(k, None)})
        objects.extend(volumes)
        snapshot = build_snapshot(objects, self.policy, self.parse_cache)
        self._forget_gone(raw)
        for key, reason in unreadable.items():
            self._note_decision([key], raw, "reject", reason)
            del raw[key]
        return snapshot, ours, raw

    def _forget_gone(self, raw: Mapping[PodKey, dict[str, Any]]) -> None:
        for key in [k for k in self._first_seen if k not in raw]:
            self._first_seen.pop(key, None)
            self._announced.pop(key, None)
        if self.parse_cache.size > 4 * (len(self.cache.pods) + 1000):
            live = {
                k
                for k in map(
                    ParseCache.key, [*self.cache.nodes.values(), *self.cache.pods.values()]
                )
                if k is not None
            }
            self.parse_cache.forget_except(live)

    def _arrival(self, key: PodKey, pod: Mapping[str, Any], now: float) -> float:
        """When the pod started waiting: its creation time, so a restart does not reset waits."""
        created = _created(pod)
        first = self._first_seen.setdefault(key, now)
        return created if created is not None else first

    # -- solving -------------------------------------------------------------------------

    def _budget(self) -> float | None:
        if self.config.solver == "greedy":
            return None
        return self.config.time_limit or self.policy.solver.time_limit_seconds

    def _solve(self, snapshot: Snapshot) -> Plan:
        if self.config.solver == "greedy":
            return greedy_plan(snapshot, self.policy)
        # The running placement's verdict and totals stay warm from batch to batch; what the
        # watch changed since the last batch (by the parse cache's object identity) is redone.
        self.warm.prepare(snapshot, self.policy)
        options = SolveOptions(
            time_limit=self.config.time_limit,
            relative_gap=self.config.relative_gap,
            verdict=self.warm.verdict,
            standing=self.warm.standing,
        )
        return solve(snapshot, self.policy, "place", options)

    def _solve_and_submit(
        self,
        snapshot: Snapshot,
        shards: list[str],
        ours: Mapping[PodKey, str],
        raw: Mapping[PodKey, dict[str, Any]],
        now: float,
        report: StepReport,
    ) -> None:
        ready = set(shards)
        members = [m for m in snapshot.members if not m.pod.pending or m.shard_key in ready]
        # Room for the members ordered shards will have later (never enforced: no pod).
        batch = snapshot.model_copy(
            update={"members": (*members, *expected_members(snapshot.members))}
        )
        batch_id = f"{self.run_id}-{next(self._batches)}"
        solved_pods = sum(1 for m in members if m.pod.pending)
        started = time.monotonic()
        plan = self._solve(batch)
        seconds = time.monotonic() - started
        self.sizer.observe(
            solved_pods, seconds, plan.status, self._budget(), plan.objective, plan.bound
        )
        self.metrics.observe_solve("place", plan.status, seconds)
        report.solved_pods, report.solve_status, report.batch = solved_pods, plan.status, batch_id
        if plan.violations:
            counts: dict[tuple[str, str], int] = defaultdict(int)
            for v in plan.violations:
                counts[(v.rule, v.severity)] += 1
            self.metrics.set_violations(counts)
        elif self.config.solver == "cp-sat":
            self.metrics.set_violations({})
        self.metrics.set_worst_domain_loss(
            {d.level: d.master_loss_ratio for d in plan.worst_domain_loss}
        )
        log.info(
            "solve batch=%s pods=%d shards=%d status=%s seconds=%.3f objective=%g bound=%g "
            "next_batch_pods=%d snapshots=%d (%.2fs)",
            batch_id,
            solved_pods,
            len(shards),
            plan.status,
            seconds,
            plan.objective,
            plan.bound,
            self.sizer.pods,
            self.reads,
            self.read_seconds,
        )
        by_key = {f"{k[0]}/{k[1]}": k for k in ours}
        summary = (
            _plan_summary(plan, seconds)
            if self.config.solver == "cp-sat"
            else f"batch placed by the greedy baseline in {seconds:.2f}s"
        )
        if not self.follow_nodes:
            self.cache.refresh_nodes()
            self._nodes_read_at = now
        placed_by_shard: dict[str, list[Placement]] = defaultdict(list)
        for a in plan.assignments:
            key = by_key.get(a.pod)
            if a.action == "place" and a.node and key is not None:
                placed_by_shard[f"{a.cluster}/{a.shard}"].append(
                    Placement(key, raw[key], a.node, a.role)
                )
        order = {shard: i for i, shard in enumerate(shards)}
        for shard in sorted(placed_by_shard, key=lambda s: (order.get(s, len(order)), s)):
            # One order for every binder (by name): see _enforce_shard.
            placements = tuple(sorted(placed_by_shard[shard], key=lambda p: p.key))
            assumed = [
                p
                for p in placements
                if self.cache.assume(p.key, _uid(p.pod), p.node, _written(p, batch_id))
            ]
            if len(assumed) < len(placements):
                # A pod got a node or was replaced since the read: solve the shard again.
                for p in assumed:
                    self.cache.forget_assumed(p.key)
                changed = [p for p in placements if p not in assumed]
                report.failed.extend(
                    (by_key_name(p.key), "changed since the solve") for p in changed
                )
                self._backoff(shard, now, immediate=True)
                continue
            log.info(
                "plan batch=%s shard=%s pods=%s", batch_id, shard,
                ",".join(f"{by_key_name(p.key)}@{p.node}:{p.role}" for p in placements),
            )  # fmt: skip
            self._in_flight.add(shard)
            job = ShardJob(shard, batch_id, placements, summary)
            self.enforcer.submit(job, self._enforce_shard)
        explanation = "; ".join(plan.explanation)
        batch_members = {m.key: m for m in batch.members}
        unplaced_shards: set[str] = set()
        for u in plan.unplaced:
            key = by_key.get(u.pod)
            if key is None:
                continue
            reason = u.reason + (f" ({explanation})" if explanation else "")
            report.unplaced.append((u.pod, reason))
            self._note_decision([key], raw, "reject", reason, event_reason="FailedScheduling")
            member = batch_members.get(u.pod)
            if member is not None:
                unplaced_shards.add(member.shard_key)
        for shard in unplaced_shards:
            self._backoff(shard, now)  # once per failed solve, not once per pod

    # -- enforcing (on the enforcer's threads) -------------------------------------------

    def _enforce_shard(self, job: ShardJob) -> ShardOutcome:
        """Write a shard's pods in order, stopping at the first one refused.

        The order is the pods' names, the same for every binder, and each shard stops at its
        first failure: if another actor put a member where a sibling was headed, the sibling
        waits for a solve that knows it. A node that vanished or was cordoned since the solve
        stops the shard before anything goes there.
        """
        outcome = ShardOutcome(job.shard, job.batch)
        placements = job.placements
        for i, p in enumerate(placements):
            blocker = self._blocker(placements[i:])
            if blocker is not None:
                reason, why = blocker
                for rest in placements[i:]:
                    self.cache.forget_assumed(rest.key)
                    outcome.failed.append((by_key_name(rest.key), why))
                    self.metrics.bind("conflict", reason)
                log.warning("shard=%s batch=%s not written: %s", job.shard, job.batch, why)
                break
            why = f"{p.role} of shard {job.shard}; {job.why}"
            try:
                result = self._enforce(p, job.batch, why, outcome)
            except Exception as exc:  # whether it landed is unknown: a re-solve finds out
                log.exception("enforce pod=%s node=%s failed", by_key_name(p.key), p.node)
                self.cache.forget_assumed(p.key)
                outcome.failed.append((by_key_name(p.key), f"error: {type(exc).__name__}: {exc}"))
                outcome.error = exc
                result = "failed"
            if result == "failed":
                for rest in placements[i + 1 :]:
                    self.cache.forget_assumed(rest.key)
                break
        written = [(n, node) for n, node in outcome.bound if (n, node) not in outcome.found]
        if written:
            log.info(
                "placed batch=%s shard=%s mode=%s pods=%s", job.batch, job.shard,
                self.config.enforce, ",".join(f"{name}@{node}" for name, node in written),
            )  # fmt: skip
        return outcome

    def _blocker(self, placements: tuple[Placement, ...]) -> tuple[str, str] | None:
        """Why these pods must not be written now, as (metric reason, message), or None."""
        if not self._leading():
            return "not_leading", "stopped: this binder no longer leads"
        nodes = self.cache.nodes
        gone = sorted({p.node for p in placements if p.node not in nodes})
        if gone:
            return "node_gone", f"node {gone[0]} is gone"
        cordoned = sorted({p.node for p in placements if _unschedulable(nodes[p.node])})
        if cordoned:
            return "node_cordoned", f"node {cordoned[0]} is cordoned"
        return None

    def _role_labels(self, pod: Mapping[str, Any], role: str) -> dict[str, str]:
        """The role label to write, if the pod does not carry the plan's role already.

        Audit and rebalance read roles from this label (or, until it is written, from the
        role annotation that rides in the same write as the node).
        """
        if not solver_picks_roles(self.policy):
            return {}  # the deployment's formation decides roles, and its own labels say them
        key = self.policy.labels.role
        current = str(_labels(pod).get(key) or "").lower()
        same = current == role or (role == "replica" and current == "slave")
        return {} if same else {key: role}

    def _enforce(
        self, p: Placement, batch: str, why: str, outcome: ShardOutcome
    ) -> Literal["placed", "gone", "failed"]:
        key, pod, node, role = p.key, p.pod, p.node, p.role
        annotations = _written(p, batch)
        if self.config.enforce == "bind":
            uid = (pod.get("metadata") or {}).get("uid")
            result = self.adapter.bind_pod(key[0], key[1], uid, node, annotations)
            if result.ok or (result.outcome is BindOutcome.CONFLICT and result.bound_node == node):
                # A conflict naming our node: bound already (by us, before a restart).
                self.cache.note_bound(key, node)
                self.metrics.bind("bound" if result.ok else "conflict", "already_bound")
                if self._role_labels(pod, role):
                    self._queue_role_label(key, _uid(pod), role)
                return self._placed(key, pod, node, why, outcome, result.ok)
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
                self._role_labels(pod, role),
                annotations,
            )
            if patched.ok:
                if patched.pod is not None:
                    self.cache.settle(patched.pod)
                else:
                    self.cache.forget_assumed(key)
                self.metrics.bind("bound")
                return self._placed(key, pod, node, why, outcome, True, pinned=(role, batch))
            reason = (
                "conflict" if patched.outcome is PatchOutcome.NOT_GATED else patched.outcome.value
            )
            status, message = patched.status, patched.message
            gone = patched.outcome is PatchOutcome.GONE
        self.cache.forget_assumed(key)
        return self._failed(key, node, reason, status, message, gone, outcome)

    def _failed(
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

    def _placed(
        self,
        key: PodKey,
        pod: Mapping[str, Any],
        node: str,
        why: str,
        outcome: ShardOutcome,
        written: bool,
        pinned: tuple[str, str] | None = None,
    ) -> Literal["placed"]:
        """``pinned`` (role, batch): gate mode, where kube-scheduler binds and says Scheduled."""
        name = by_key_name(key)
        outcome.bound.append((name, node))
        if not written:
            outcome.found.append((name, node))
        reason, message = "Scheduled", f"Successfully assigned {name} to {node}: {why}"
        if pinned is not None:
            reason = "Pinned"
            message = f"Pinned {name} to {node} as {pinned[0]} (batch {pinned[1]}): {why}"
        self.background.event(
            pod,
            reason,
            message,
            supersedes=(("WaitingForShard", "Normal"), ("FailedScheduling", "Warning")),
        )
        if not written:
            log.info("pod=%s already bound to %s, the node this plan chose", name, node)
        return "placed"

    def _queue_role_label(self, key: PodKey, uid: str, role: str) -> None:
        self.background.call(("role", key), lambda: self._write_role_label(key, uid, role, 1))

    def _write_role_label(self, key: PodKey, uid: str, role: str, attempt: int) -> None:
        """Label a bound pod with the role its annotation records, if it has no role label.

        The patch carries the resourceVersion it was computed from, so a label written
        meanwhile (rebalance after a failover) is never overwritten.
        """
        if not self._leading():
            return
        pod = self.cache.server_pod(key) if attempt == 1 else None
        if pod is None or not _spec(pod).get("nodeName"):
            pod = self.adapter.get_pod(*key)  # the watch has not shown our write yet
        role_key = self.policy.labels.role
        if pod is None or _uid(pod) != uid or role_key in _labels(pod):
            return
        if _annotations(pod).get(ROLE_ANNOTATION) not in (None, role):
            return  # decided again since (a newer binder): its own label write follows
        version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        result = self.adapter.patch_pod_labels(key[0], key[1], {role_key: role}, version)
        if result.ok and result.pod is not None:
            self.cache.put_pod(result.pod)
        elif result.outcome is PatchOutcome.CONFLICT and attempt < LABEL_ATTEMPTS:
            self.background.call(
                ("role", key), lambda: self._write_role_label(key, uid, role, attempt + 1)
            )
        elif not result.ok:
            log.warning("role label of pod %s not written: %s", by_key_name(key), result.message)

    def _backoff(self, shard: str, now: float, immediate: bool = False) -> None:
        attempts = self._retry.get(shard, (0, now))[0] + 1
        delay = self.config.retry_base_seconds * 2 ** (attempts - 1)
        if immediate and attempts == 1:
            delay = 0.0
        self._retry[shard] = (attempts, now + min(delay, self.config.retry_max_seconds))

    # -- events --------------------------------------------------------------------------

    def _event(
        self, pod: Mapping[str, Any], reason: str, message: str, type_: EventType = "Normal"
    ) -> None:
        self.background.event(pod, reason, message, type_)

    def _note_decision(
        self,
        pods: list[PodKey],
        raw: Mapping[PodKey, dict[str, Any]],
        decision: str,
        reason: str,
        event_reason: str | None = None,
    ) -> None:
        """Count and announce a Permit decision once per pod and change, not once per step."""
        for key in pods:
            if self._announced.get(key) == (decision, reason):
                continue
            self._announced[key] = (decision, reason)
            self.metrics.permit(decision)
            log.info("permit pod=%s decision=%s reason=%s", by_key_name(key), decision, reason)
            if decision == "wait":
                self._event(raw[key], "WaitingForShard", reason)
            elif decision == "reject":
                self._event(raw[key], event_reason or "FailedScheduling", reason, "Warning")

    def _announce_issues(
        self, snapshot: Snapshot, raw: Mapping[PodKey, dict[str, Any]], ours: Mapping[PodKey, str]
    ) -> None:
        """Input problems with our own pods (missing labels, two masters) go on the pod."""
        by_object = {f"pod {name}": key for key, name in ours.items()}
        for issue in snapshot.issues:
            key = by_object.get(issue.object)
            if key is not None:
                self._note_decision([key], raw, "reject", issue.message)

    # -- the loop ------------------------------------------------------------------------

    def run(
        self,
        stop: threading.Event,
        leading: Callable[[], bool] = lambda: True,
        on_step: Callable[[StepReport], None] | None = None,
        want_lease: Callable[[bool], None] | None = None,
    ) -> None:
        """Step until ``stop``; a watch thread keeps the cache current and wakes the loop.

        Each step hands its batch to the enforcer and goes on to the next one; finished
        shards wake the loop. ``want_lease`` (without leader election) is told whether there
        is anything to do, so the Lease is taken only while there is.
        """
        wake = threading.Event()
        self.enforcer.on_done = wake.set
        self._leading = leading

        # Each pod event wakes the loop; node events only keep the cache current, or 5,000
        # nodes' status updates would keep it stepping with nothing to place.
        def follow_pods(timeout: int) -> int:
            return self.cache.poll(timeout, on_event=wake.set)

        watchers = [
            threading.Thread(target=self._follow, args=(stop, poll), name=name, daemon=True)
            for name, poll in (
                ("pod-watch", follow_pods),
                ("node-watch", self.cache.poll_nodes),
            )
        ]
        self.cache.resync()
        for watcher in watchers:
            watcher.start()
        self.follow_nodes = True
        self.background.start()
        was_leading = False
        streaming = False
        try:
            while not stop.is_set():
                if not leading():
                    was_leading = False
                    if want_lease is not None:
                        want_lease(self.has_work())
                    _sleep(1.0 if want_lease is None else 0.2, wake, stop)
                    wake.clear()
                    continue
                if not was_leading:
                    self._resync()  # a new leader trusts nothing it saw as a standby
                    was_leading = True
                wake.clear()
                now = self.clock()
                try:
                    report = self._plan(now, streaming=streaming or self.enforcer.busy)
                    self._finish(report, now)
                    self._reconcile_pdbs(now)
                    streaming = report.solve_status is not None
                except Exception:
                    log.exception("step failed; retrying")
                    report = StepReport(next_step_in=self.config.retry_base_seconds)
                if want_lease is not None:
                    want_lease(self.has_work())
                if on_step is not None:
                    on_step(report)
                if report.next_step_in > 0:  # events arriving meanwhile are taken together
                    stop.wait(max(0.0, STEP_INTERVAL - (self.clock() - now)))
                _sleep(report.next_step_in - (self.clock() - now), wake, stop)
        finally:
            self.follow_nodes = False
            self.enforcer.wait(timeout=30)  # writes in flight finish (each has its timeout)
            leftover = StepReport()
            self._finish(leftover, self.clock())
            if on_step is not None and (leftover.bound or leftover.failed):
                on_step(leftover)
            self.background.stop()
            self._leading = lambda: True
            for watcher in watchers:
                watcher.join(timeout=2)  # daemons: a watch blocked on the network dies with us

    def _follow(self, stop: threading.Event, poll: Callable[[int], int]) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                poll(30)
            except Exception as exc:
                log.warning("watch failed: %s; resyncing", exc)
                stop.wait(1.0)
                try:
                    self.cache.resync()
                except Exception as again:
                    log.warning("resync failed: %s", again)
                continue
            if time.monotonic() - started < 1.0:
                stop.wait(0.2)  # a watch that ends at once must not spin


def _written(placement: Placement, batch: str) -> dict[str, str]:
    """The annotations a pod's write records: the role its plan gave it, and which batch."""
    return {ROLE_ANNOTATION: placement.role, BATCH_ANNOTATION: batch}


def _unknown_owners(pods: list[Pod], statefulsets: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The StatefulSets our pods belong to (as the snapshot reads the owner) that we lack."""
    known = {
        (str(s["metadata"].get("namespace") or "default"), str(s["metadata"].get("name")))
        for s in statefulsets
    }
    owners = {
        (p.namespace, p.owner_name) for p in pods if p.owner_kind == "StatefulSet" and p.owner_name
    }
    return owners - known


def _sleep(seconds: float, wake: threading.Event, stop: threading.Event) -> None:
    """Until ``seconds`` pass, a pod event wakes us, or we are told to stop (SIGTERM)."""
    deadline = time.monotonic() + seconds
    while not stop.is_set() and not wake.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        wake.wait(min(left, 0.25))


def by_key_name(key: PodKey) -> str:
    return f"{key[0]}/{key[1]}"


def _unschedulable(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def _plan_summary(plan: Plan, seconds: float) -> str:
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
