"""The Permit-gate binder: hold pending Redis pods until their shard is whole, solve, enforce.

One ``step`` is one decision: read the cache, decide per shard (``placer.binder.permit``), solve every
ready shard in one call with the running pods fixed, and enforce the plan through the adapter
(a Binding in bind mode; a pin and the gate's removal in gate mode). ``run`` repeats steps,
woken by the watch. Nothing is remembered that the cluster does not hold except backoff
timers and event de-duplication, so a restarted binder carries on where the cluster is.
"""

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from models.cluster import Pod
from models.errors import InputError
from models.kube_objects import ParseCache, build_snapshot
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer.binder.cache import ClusterCache, PodKey, pod_key_of
from placer.binder.pdbs import PdbManager
from placer.binder.permit import PermitDecision, decide, gangs
from placer.kube.adapter import BindOutcome, EventType, KubeAdapter, PatchOutcome
from placer.kube.objects import NODE_NAME_FIELD, gate_names
from placer.metrics import Metrics
from solver.greedy import greedy_plan
from solver.solve import SolveOptions, solve

log = logging.getLogger(__name__)

Enforce = Literal["bind", "gate"]
PLACEMENT_GATE = "redis-placer.io/placement"
DEFAULT_BINDER_TIME_LIMIT = 5.0
"""Per-batch solve budget of ``redis-placer binder`` (docs/benchmarks.md has the trade-off)."""
IDLE_SECONDS = 30.0
"""Longest sleep between steps when nothing wakes the binder (a watch event does)."""


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
    manage_pdbs: bool = False
    """Create a PodDisruptionBudget for each shard placed, delete it with the shard."""


@dataclass
class StepReport:
    """What one step decided and did, for logs, tests and the benchmark."""

    decisions: list[PermitDecision] = field(default_factory=list)
    solved_pods: int = 0
    solve_status: str | None = None
    bound: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    unplaced: list[tuple[str, str]] = field(default_factory=list)
    next_step_in: float = IDLE_SECONDS


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("spec") or {}


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
        self._owners_sought: set[tuple[str, str]] = set()
        self._sets_read_at = float("-inf")
        self.follow_nodes = False
        """True while a node watch keeps the cache's nodes current (``run`` starts one); a
        caller that steps by hand gets a fresh node list before every batch instead."""
        self._window_opened: float | None = None
        self._nodes_read_at = float("-inf")
        self._retry: dict[str, tuple[int, float]] = {}
        self._first_seen: dict[PodKey, float] = {}
        self._announced: dict[PodKey, tuple[str, str]] = {}
        self._last_read: (
            tuple[int, tuple[Snapshot, dict[PodKey, str], dict[PodKey, dict[str, Any]]]] | None
        ) = None

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

    # -- one decision --------------------------------------------------------------------

    def step(self, now: float | None = None) -> StepReport:
        now = self.clock() if now is None else now
        report = self._decide(now)
        if self.pdbs is not None:
            self.pdbs.reconcile(self._read()[0], self.cache.statefulsets, now)
        return report

    def _decide(self, now: float) -> StepReport:
        report = StepReport()
        every = self.config.node_refresh_seconds
        if not self.cache.synced:
            self.cache.resync()
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
        for shard in [s for s in self._retry if s not in waiting_shards]:
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
            ready.append(d.shard)
        if not ready:
            self._window_opened = None
            report.next_step_in = max(0.0, min(wake))
            return report
        if self._window_opened is None:
            self._window_opened = now
        remaining = self.policy.permit.batch_window_seconds - (now - self._window_opened)
        if remaining > 0:
            report.next_step_in = min(min(wake), remaining)
            return report
        self._window_opened = None
        for shard in ready:
            self._note_decision(members_by_shard[shard], raw, "allow", "")
        self._solve_and_enforce(snapshot, set(ready), ours, raw, now, report)
        wake.extend(t - now for _, t in self._retry.values() if t > now)  # past ones: no spin
        report.next_step_in = 0.0 if report.failed else max(0.0, min(wake))
        return report

    def _read(self) -> tuple[Snapshot, dict[PodKey, str], dict[PodKey, dict[str, Any]]]:
        """The snapshot this decision works on, and which pending pods are ours.

        Rebuilt only when the cache changed since the last step: a batch window's steps mostly
        look at the same cluster, and 15,000 pods are not re-read to learn nothing.
        """
        generation = self.cache.generation
        if self._last_read is not None and self._last_read[0] == generation:
            return self._last_read[1]
        result = self._build()
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
                objects.append(pod)
            elif not _spec(pod).get("nodeName") and self.managed(pod):
                pin = pinned_node(pod) if self.config.gate not in gate_names(pod) else None
                if pin is not None:
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

    # -- solving and enforcing -----------------------------------------------------------

    def _solve(self, snapshot: Snapshot) -> Plan:
        if self.config.solver == "greedy":
            return greedy_plan(snapshot, self.policy)
        limit = self.config.time_limit
        return solve(snapshot, self.policy, "place", SolveOptions(time_limit=limit))

    def _solve_and_enforce(
        self,
        snapshot: Snapshot,
        ready: set[str],
        ours: Mapping[PodKey, str],
        raw: Mapping[PodKey, dict[str, Any]],
        now: float,
        report: StepReport,
    ) -> None:
        batch = snapshot.model_copy(
            update={
                "members": tuple(
                    m for m in snapshot.members if not m.pod.pending or m.shard_key in ready
                )
            }
        )
        solved_pods = sum(1 for m in batch.members if m.pod.pending)
        started = time.monotonic()
        plan = self._solve(batch)
        seconds = time.monotonic() - started
        self.metrics.observe_solve("place", plan.status, seconds)
        report.solved_pods, report.solve_status = solved_pods, plan.status
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
            "solve pods=%d shards=%d status=%s seconds=%.3f objective=%g bound=%g",
            solved_pods,
            len(ready),
            plan.status,
            seconds,
            plan.objective,
            plan.bound,
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
        nodes = self.cache.nodes
        placed_by_shard: dict[str, list[tuple[PodKey, str, str]]] = defaultdict(list)
        for a in plan.assignments:
            key = by_key.get(a.pod)
            if a.action == "place" and a.node and key is not None:
                placed_by_shard[f"{a.cluster}/{a.shard}"].append((key, a.node, a.role))
        for shard, placed in sorted(placed_by_shard.items()):
            gone = sorted({n for _, n, _ in placed if n not in nodes or _unschedulable(nodes[n])})
            if gone:
                # A node vanished (or was cordoned) since the read: place the shard again.
                for key, node, _ in placed:
                    report.failed.append((by_key_name(key), f"node {node} is gone"))
                    self.metrics.bind("conflict", "node_gone")
                self._backoff(shard, now, immediate=True)
                log.warning("shard=%s nodes vanished before binding: %s", shard, ", ".join(gone))
                continue
            outcomes = []
            for key, node, role in placed:
                outcome = self._enforce(
                    key, raw[key], node, role, f"{role} of shard {shard}; {summary}", report
                )
                outcomes.append(outcome)
                if outcome == "failed":
                    # The shard's plan rested on that pod landing there; another actor may
                    # have put it where a sibling was headed. Re-solve before binding more.
                    break
            if all(o == "placed" for o in outcomes):
                self._retry.pop(shard, None)
            else:
                self._backoff(shard, now, immediate=True)
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

    def _role_labels(self, pod: Mapping[str, Any], role: str) -> dict[str, str]:
        """The role label to write, if the pod does not carry the plan's role already.

        Audit and rebalance read roles from this label, and a re-solve after a crash keeps a
        labelled pending pod's role: without it a half-bound shard would change its mind.
        """
        key = self.policy.labels.role
        current = str(_labels(pod).get(key) or "").lower()
        same = current == role or (role == "replica" and current == "slave")
        return {} if same else {key: role}

    def _enforce(
        self,
        key: PodKey,
        pod: dict[str, Any],
        node: str,
        role: str,
        why: str,
        report: StepReport,
    ) -> Literal["placed", "gone", "failed"]:
        labels = self._role_labels(pod, role)
        if self.config.enforce == "bind":
            uid = (pod.get("metadata") or {}).get("uid")
            if labels:
                labelled = self.adapter.patch_pod_labels(key[0], key[1], labels)
                if not labelled.ok:
                    return self._failed(
                        key,
                        node,
                        labelled.outcome.value,
                        labelled.status,
                        labelled.message,
                        labelled.outcome is PatchOutcome.GONE,
                        report,
                    )
                if labelled.pod is not None:
                    self.cache.put_pod(labelled.pod)
            result = self.adapter.bind_pod(key[0], key[1], uid, node)
            if result.ok or (result.outcome is BindOutcome.CONFLICT and result.bound_node == node):
                # A conflict naming our node: bound already (by us, before a restart).
                self.cache.note_bound(key, node)
                self.metrics.bind("bound" if result.ok else "conflict", "already_bound")
                return self._placed(key, pod, node, why, report)
            outcome, status, message = result.outcome.value, result.status, result.message
            gone = result.outcome is BindOutcome.GONE
        else:
            version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
            patched = self.adapter.pin_and_ungate(
                key[0], key[1], node, self.config.gate, version, pod, labels
            )
            if patched.ok:
                if patched.pod is not None:
                    self.cache.put_pod(patched.pod)
                self.metrics.bind("bound")
                return self._placed(key, pod, node, why, report)
            outcome = (
                "conflict" if patched.outcome is PatchOutcome.NOT_GATED else patched.outcome.value
            )
            status, message = patched.status, patched.message
            gone = patched.outcome is PatchOutcome.GONE
        return self._failed(key, node, outcome, status, message, gone, report)

    def _failed(
        self,
        key: PodKey,
        node: str,
        outcome: str,
        status: int,
        message: str,
        gone: bool,
        report: StepReport,
    ) -> Literal["gone", "failed"]:
        """Count the failure, and re-read the pod so the next solve starts from the truth."""
        name = by_key_name(key)
        self.metrics.bind(outcome, f"http_{status}" if status else outcome)
        report.failed.append((name, f"{outcome}: {message}"))
        log.warning("enforce pod=%s node=%s outcome=%s message=%s", name, node, outcome, message)
        if gone:
            self.cache.forget_pod(key)
            return "gone"
        fresh = self.adapter.get_pod(*key)
        if fresh is None:
            self.cache.forget_pod(key)
            return "gone"
        self.cache.put_pod(fresh)
        return "failed"

    def _placed(
        self, key: PodKey, pod: Mapping[str, Any], node: str, why: str, report: StepReport
    ) -> Literal["placed"]:
        name = by_key_name(key)
        report.bound.append((name, node))
        self._event(pod, "Scheduled", f"Successfully assigned {name} to {node}: {why}")
        self._announced.pop(key, None)
        log.info("placed pod=%s node=%s mode=%s", name, node, self.config.enforce)
        return "placed"

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
        try:
            self.adapter.record_event(pod, reason, message, type_)
        except Exception as exc:
            log.warning("event on %s not recorded: %s", by_key_name(pod_key_of(pod)), exc)

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
    ) -> None:
        """Step until ``stop``; a watch thread keeps the cache current and wakes the loop."""
        wake = threading.Event()

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
        was_leading = False
        while not stop.is_set():
            if not leading():
                was_leading = False
                _sleep(1.0, wake, stop)
                wake.clear()
                continue
            if not was_leading:
                self.cache.resync()  # a new leader trusts nothing it saw as a standby
                was_leading = True
            try:
                report = self.step()
            except Exception:
                log.exception("step failed; retrying")
                report = StepReport(next_step_in=self.config.retry_base_seconds)
            if on_step is not None:
                on_step(report)
            _sleep(report.next_step_in, wake, stop)
            wake.clear()
        self.follow_nodes = False
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
