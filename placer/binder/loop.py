"""The Permit-gate binder: hold pending Redis pods until their shard is whole, solve, enforce.

One ``step`` is one decision: read the cache, decide per shard, solve the oldest ready shards in
one call with the running pods fixed, and hand the plan to the enforcer, which writes up to
``concurrency`` shards at once. ``step`` waits for its writes; ``run`` does not: it solves the
next batch while the last one is being bound, every decided pod already counted on its node in
the cache. Nothing is remembered that the cluster does not hold except backoff timers and event
de-duplication, so a restarted binder carries on where the cluster is.

``Binder`` composes parts with one job each, as kube-scheduler keeps its scheduling and binding
cycles apart:

- reading (``placer.binder.reading``): the snapshot from the cache, and which pods are ours;
- holding (``placer.binder.holding``, with the pure ``placer.binder.permit``): the per-shard
  decisions, retries and the batch window, and so which shards the next batch takes;
- solving (``placer.binder.solving``, sized by ``placer.binder.batching``): the batch's solve and
  its plan read as placements per shard;
- writing (``placer.binder.writing`` on the threads of ``placer.binder.enforce``): a Binding per
  pod in bind mode, a pin and the gate's removal in gate mode;
- reporting (``placer.binder.reporting``, sent by ``placer.binder.background``): Events, decision
  logs, role labels and the plan's figures, never in the way of a binding.
"""

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from models.kube_objects import ParseCache
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer.binder.background import BackgroundWrites
from placer.binder.batching import BatchSizer
from placer.binder.cache import ClusterCache, PodKey
from placer.binder.config import (
    DEFAULT_BATCH_SECONDS,
    DEFAULT_BINDER_TIME_LIMIT,
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_BATCH_PODS,
    DEFAULT_RELATIVE_GAP,
    FIRST_SECONDS_PER_POD,
    PLACEMENT_GATE,
    BinderConfig,
    Enforce,
)
from placer.binder.enforce import Enforcer, ShardJob
from placer.binder.holding import IDLE_SECONDS, Holding, StepReport
from placer.binder.pdbs import PdbManager
from placer.binder.reading import Read, Reader, by_key_name, pinned_node, uid
from placer.binder.refusals import Refusals
from placer.binder.reporting import LABEL_ATTEMPTS, Reporter
from placer.binder.solving import Solving, placements, unplaced
from placer.binder.writing import Writer, written
from placer.kube.adapter import EventType, KubeAdapter, KubeApiError
from placer.kube.objects import gate_names
from placer.metrics import Metrics
from solver.warm import Warm

__all__ = [
    "DEFAULT_BATCH_SECONDS",
    "DEFAULT_BINDER_TIME_LIMIT",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_BATCH_PODS",
    "DEFAULT_RELATIVE_GAP",
    "FIRST_SECONDS_PER_POD",
    "IDLE_SECONDS",
    "LABEL_ATTEMPTS",
    "PLACEMENT_GATE",
    "STEP_INTERVAL",
    "Binder",
    "BinderConfig",
    "Enforce",
    "StepReport",
    "by_key_name",
    "pinned_node",
]

log = logging.getLogger(__name__)

WATCH_RETRY_MAX_SECONDS = 2.0
"""The longest wait between two attempts to list the cluster again after a watch broke: the
binder is back within this of the API server's return."""

WATCH_JOIN_SECONDS = 2.0
"""How long a stopping binder waits for its watch threads, all of them together."""

PLACING_SECONDS = 1.0
"""For this long after a batch is solved, the background writes keep their busy rate (while
an arrival goes on, the next batch follows within it)."""

FRESH_LIST_SECONDS = 5.0
"""A binder that takes the Lease within this long of its first list decides from that list: it
has decided nothing yet, and its watch has followed the list since (a broken watch loses the
cache, which is then listed again anyway). Listing 1,500 waiting pods and 1,000 nodes again
took 0.14-0.25 s before the first decision on the benchmark's API server. A standby that takes
over later, or a binder that leads again, lists first."""

STEP_INTERVAL = 0.1
"""Shortest time between two steps that a watch event starts: a step rebuilds the snapshot of
the whole cluster, and a rollout's pods arrive faster than that is worth doing."""


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
        self.readable_listeners: list[Callable[[bool], None]] = []
        """Told when the cluster becomes readable and when it stops being so (readiness)."""
        self.cache.on_readable = self._readable
        self.cache.on_expired = lambda what: self.metrics.watch_expired.labels(
            watch="nodes" if what.startswith("node") else "pods"
        ).inc()
        self.pdbs = (
            PdbManager(adapter, policy, self.config.enforce, self.config.namespace)
            if self.config.manage_pdbs
            else None
        )
        self.parse_cache = ParseCache()
        self.warm = Warm(self.policy)
        self.refusals = Refusals(adapter, self._event, self.config.recreate_refused, clock)
        self.enforcer = Enforcer(self.config.concurrency)
        self.background = BackgroundWrites(
            adapter,
            qps=self.config.event_qps,
            busy=lambda: self.enforcer.busy or self._placing(),
            on_drop=lambda kind: self.metrics.deferred_dropped.labels(kind=kind).inc(),
        )
        self.sizer = BatchSizer(
            target_seconds=self.config.batch_seconds,
            max_pods=self.config.max_batch_pods,
            seconds_per_pod=FIRST_SECONDS_PER_POD[self.config.solver],
        )
        self._solved_at: float | None = None
        """When the last batch was solved (``_placing``)."""
        self.run_id = secrets.token_hex(4)
        """Names this process's batches (``<run_id>-<n>``) in logs and pod annotations."""
        self._leading: Callable[[], bool] = lambda: True
        self._read_at: float | None = None
        """When the last step read the cluster (``_plan``'s quiet steps count from it)."""
        self.follow_nodes = False
        """True while a node watch keeps the cache's nodes current (``run`` starts one); a
        caller that steps by hand gets a fresh node list before every batch instead."""
        self.reporter = Reporter(
            adapter, policy, self.cache, self.metrics, self.background, self._leads
        )
        self.reader = Reader(
            adapter,
            policy,
            self.config,
            self.cache,
            self.parse_cache,
            self.refusals,
            self.reporter.note_decision,
            self.reporter.forget,
        )
        self.holding = Holding(
            policy,
            self.config,
            self.sizer,
            self.enforcer,
            self.reporter,
            read_seconds=lambda: self.reader.recent_read_seconds,
            handed_down=self.reader.pinned_waiting,
        )
        self.solving = Solving(
            policy,
            self.config,
            self.metrics,
            self.sizer,
            self.warm,
            self.run_id,
            self.holding.to_explain,
        )
        self.writer = Writer(
            adapter,
            self.config,
            self.cache,
            self.metrics,
            self.background,
            self.reporter,
            self._leads,
        )

    def _readable(self, readable: bool) -> None:
        self.metrics.cluster_readable.set(1 if readable else 0)
        if not readable:
            self.metrics.cluster_unreadable.inc()
        for listener in self.readable_listeners:
            listener(readable)

    def _leads(self) -> bool:
        """Whether this binder leads now (``run`` replaces ``_leading``; the parts ask here)."""
        return self._leading()

    @property
    def _retry(self) -> dict[str, tuple[int, float]]:
        """Retry timers by shard: (attempts, not before)."""
        return self.holding.retry

    # -- which pods are ours -------------------------------------------------------------

    def managed(self, pod: Mapping[str, Any]) -> bool:
        return self.reader.managed(pod)

    def is_ours(self, pod: Mapping[str, Any]) -> bool:
        """A pending managed pod this binder must place, by the enforcement mode's marker."""
        return self.reader.is_ours(pod)

    def has_work(self) -> bool:
        """Pods of ours pending, or writes of ours in flight: what a binder without leader
        election takes the Lease for."""
        return self.enforcer.busy or self.reader.pending_ours() > 0

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

    def _reconcile_pdbs(self, now: float, report: StepReport | None = None) -> None:
        """``--manage-pdbs``: a PodDisruptionBudget for each shard placed, gone with it. A
        step that read nothing (``report.read`` False) looks at the last snapshot read."""
        if self.pdbs is None:
            return
        if report is None or report.read:
            snapshot = self._read()[0]
        elif self.reader.last_read is not None:
            snapshot = self.reader.last_read[1][0]
        else:
            return
        self.pdbs.reconcile(snapshot, self.cache.statefulsets, now)

    def _plan(self, now: float, streaming: bool = False, quiet: bool = False) -> StepReport:
        """Decide, and if a batch is due (``Holding.select``), solve it and hand it to the
        enforcer (no waiting). ``quiet`` (the running loop): while none of our pods is pending,
        the cluster is read at most every ``QUIET_READ_SECONDS``."""
        report = StepReport()
        if self.cache.synced:
            wait = self.holding.unread_wait(
                self.reader.pending_ours,
                now,
                streaming,
                self.reader.ordered_pending,
                self._read_at if quiet else None,
            )
            if wait is not None:  # no batch can be due: the step waits without a snapshot
                report.next_step_in = wait
                report.read = False
                return report
        self.reader.refresh(now, self.follow_nodes, self._resync)
        self._read_at = now
        snapshot, ours, raw = self._read()
        self.metrics.pending_pods.set(len(ours))
        self.metrics.gated_pods.set(
            sum(1 for p in raw.values() if self.config.gate in gate_names(p))
        )
        self.reporter.announce_issues(snapshot, raw, ours)
        waited = {name: now - self.reader.arrival(k, raw[k], now) for k, name in ours.items()}
        selection = self.holding.select(
            snapshot, ours, raw, waited, now, streaming, report, IDLE_SECONDS
        )
        if selection is None:
            return report
        self._solve_and_submit(snapshot, selection.shards, ours, raw, now, report)
        if len(selection.shards) < selection.ready:
            report.next_step_in = 0.0  # more shards are ready: the next batch now
        return report

    def _placing(self) -> bool:
        """Whether an arrival is being placed: a batch was solved within ``PLACING_SECONDS``.

        The background writes go at their busy rate then, not only while Bindings are in
        flight, so the API server's time in the gaps between batches goes to the pods still
        being created and bound (1,500 pods on a real API server: about 50 Events and labels
        were sent in those gaps, a request each for the API server and the binder)."""
        solved = self._solved_at
        return solved is not None and self.clock() - solved < PLACING_SECONDS

    def _finish(self, report: StepReport, now: float) -> list[BaseException]:
        """Take in the shards the enforcer finished: retry the incomplete ones at once."""
        return self.holding.finish(self.enforcer.completed(), report, now)

    def _resync(self) -> None:
        """List everything again, and label the pods whose role only an annotation records."""
        self.cache.resync()
        self._label_unlabelled()

    def _label_unlabelled(self) -> None:
        """Queue role labels for the pods whose role only an annotation records (bound by a
        binder that stopped before its background writes)."""
        self.reporter.label_unlabelled(self.cache.objects()[1])

    def _read(self) -> Read:
        """The snapshot this decision works on, and which pending pods are ours."""
        return self.reader.read()

    # -- solving and handing over --------------------------------------------------------

    def _solve(self, snapshot: Snapshot) -> Plan:
        return self.solving.solve(snapshot)

    def _solve_and_submit(
        self,
        snapshot: Snapshot,
        shards: list[str],
        ours: Mapping[PodKey, str],
        raw: Mapping[PodKey, dict[str, Any]],
        now: float,
        report: StepReport,
    ) -> None:
        reader = self.reader
        reads = (
            reader.reads,
            reader.read_seconds,
            reader.read_cpu_seconds,
            reader.builder.whole_builds,
        )
        solved = self.solving.solve_batch(snapshot, shards, report, self._solve, reads)
        self._solved_at = self.clock()
        batch_id = solved.batch_id
        summary = self.solving.summary(solved)
        if not self.follow_nodes:
            self.reader.refresh_nodes(now)
        for shard, shard_placements in placements(solved.plan, ours, raw, shards):
            # One order for every binder (by name): see Writer.enforce_shard.
            assumed = [
                p
                for p in shard_placements
                if self.cache.assume(p.key, uid(p.pod), p.node, written(p, batch_id))
            ]
            if len(assumed) < len(shard_placements):
                # A pod got a node or was replaced since the read: solve the shard again.
                for p in assumed:
                    self.cache.forget_assumed(p.key)
                changed = [p for p in shard_placements if p not in assumed]
                report.failed.extend(
                    (by_key_name(p.key), "changed since the solve") for p in changed
                )
                self.holding.backoff(shard, now, immediate=True)
                continue
            log.info(
                "plan batch=%s shard=%s pods=%s", batch_id, shard,
                ",".join(f"{by_key_name(p.key)}@{p.node}:{p.role}" for p in shard_placements),
            )  # fmt: skip
            self.holding.in_flight.add(shard)
            job = ShardJob(shard, batch_id, shard_placements, summary)
            self.enforcer.submit(job, self.writer.enforce_shard)
        unplaced_shards: set[str] = set()
        for u in unplaced(solved, ours):
            report.unplaced.append((u.pod, u.reason))
            self.reporter.note_decision(
                [u.key], raw, "reject", u.reason, event_reason="FailedScheduling"
            )
            if u.shard is not None:
                unplaced_shards.add(u.shard)
        for shard in unplaced_shards:
            self.holding.leave_out(shard, now)  # once per failed solve, not once per pod

    # -- events --------------------------------------------------------------------------

    def _event(
        self, pod: Mapping[str, Any], reason: str, message: str, type_: EventType = "Normal"
    ) -> None:
        self.reporter.event(pod, reason, message, type_)

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
            threading.Thread(target=self._follow, args=(stop, poll, relist), name=name, daemon=True)
            for name, poll, relist in (
                ("pod-watch", follow_pods, self.cache.resync),
                ("node-watch", self.cache.poll_nodes, self.cache.refresh_nodes),
            )
        ]
        self._first_list(stop)
        first_list_at: float | None = time.monotonic()
        for watcher in watchers:
            watcher.start()
        self.follow_nodes = True
        self.background.start()
        was_leading = False
        streaming = False
        recoveries = self.cache.recoveries
        try:
            while not stop.is_set():
                if not leading():
                    was_leading = False
                    if want_lease is not None:
                        want_lease(self.has_work())
                    _sleep(0.2, wake, stop)  # a Lease taken is acted on at once
                    wake.clear()
                    continue
                wake.clear()
                now = self.clock()
                try:
                    if not was_leading:
                        fresh = first_list_at is not None and (
                            time.monotonic() - first_list_at <= FRESH_LIST_SECONDS
                        )
                        if fresh:
                            self._label_unlabelled()  # what a stopped predecessor left
                        else:
                            self._resync()  # a new leader trusts nothing it saw as a standby
                        first_list_at = None  # from now on each new leadership lists
                        was_leading = True
                        log.info("deciding as the leader")
                        self.holding.retry_now()
                    if self.cache.recoveries != recoveries:
                        recoveries = self.cache.recoveries
                        self.holding.retry_now()  # what failed while unreadable goes now
                    report = self._plan(now, streaming=streaming or self.enforcer.busy, quiet=True)
                    self._finish(report, now)
                    self._reconcile_pdbs(now, report)
                    streaming = report.solve_status is not None
                except KubeApiError as exc:
                    # The cluster cannot be read (said once, by the cache): no decision is
                    # made until a list succeeds, tried again every retry_base_seconds.
                    log.debug("step: the cluster cannot be read: %s", exc)
                    self._finish(StepReport(), now)
                    report = StepReport(next_step_in=self.config.retry_base_seconds)
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
            # Daemons: a watch blocked on the network dies with us. One deadline for all, so
            # the Lease (released after this returns) waits 2 s at most, not 2 s per watch.
            joined_by = time.monotonic() + WATCH_JOIN_SECONDS
            for watcher in watchers:
                watcher.join(timeout=max(0.0, joined_by - time.monotonic()))

    def _first_list(self, stop: threading.Event) -> None:
        """The first list, tried until it succeeds (the API server may be restarting as
        the binder starts): not ready until then, and no crash loop meanwhile."""
        delay = self.config.retry_base_seconds
        while True:
            try:
                self.cache.resync()
                return
            except KubeApiError:
                if stop.wait(delay):
                    raise
                delay = min(2 * delay, WATCH_RETRY_MAX_SECONDS)

    def _follow(
        self, stop: threading.Event, poll: Callable[[int], int], relist: Callable[[], None]
    ) -> None:
        """Follow one watch; when it breaks, the cache is lost and listed again (``relist``)
        every second, doubling to ``WATCH_RETRY_MAX_SECONDS``, until the server answers."""
        delay = 0.0
        while not stop.is_set():
            started = time.monotonic()
            try:
                if delay:
                    relist()
                poll(30)
            except Exception as exc:
                if self.cache.lost is None:
                    self.cache.lose(f"{threading.current_thread().name} failed: {exc}")
                else:
                    log.debug("%s: still failing: %s", threading.current_thread().name, exc)
                delay = min(2 * delay, WATCH_RETRY_MAX_SECONDS) if delay else 1.0
                stop.wait(delay)
                continue
            delay = 0.0
            if time.monotonic() - started < 1.0:
                stop.wait(0.2)  # a watch that ends at once must not spin


def _sleep(seconds: float, wake: threading.Event, stop: threading.Event) -> None:
    """Until ``seconds`` pass, a pod event wakes us, or we are told to stop (SIGTERM)."""
    deadline = time.monotonic() + seconds
    while not stop.is_set() and not wake.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        wake.wait(min(left, 0.25))
