"""Holding: which ready shards go to the solver now, and which wait (for company or a retry).

``placer.binder.permit`` decides per shard from what the cluster holds; this part adds what
the binder itself keeps between steps: shards in flight (being written), retry timers of
shards whose writes or solve failed, when the batch window opened and when each ready shard
was first found ready. From these it picks the next batch, the oldest ready shards first, as
many as the solver handles in its target time.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from models.policy import Policy
from models.snapshot import Snapshot
from placer.binder.batching import BatchSizer
from placer.binder.cache import PodKey
from placer.binder.config import BinderConfig
from placer.binder.enforce import Enforcer, ShardOutcome
from placer.binder.permit import PermitDecision, decide, gangs
from placer.binder.reporting import Reporter

IDLE_SECONDS = 30.0
"""Longest sleep between steps when nothing wakes the binder (a watch event does)."""
LEAD_MARGIN = 1.5
"""How much longer than its recent cost a batch's read and solve are allowed to take before
the enforcer runs out of work (``Holding._runs_dry``)."""


QUIET_READ_SECONDS = 1.0
"""While none of our pods is pending, the running loop reads the cluster at most this often:
every other pod's event (kube-scheduler binding the pins, in gate mode, fifty a second) would
otherwise rebuild the snapshot only to find nothing to place. What such a read still catches
(a pin kube-scheduler refused, a shard's PodDisruptionBudget) waits at most this long."""
EXPLAIN_AGAIN = 10
"""A shard the solver keeps leaving out is explained at length again after this many short
refusals (about ten minutes at the longest retry delay): what keeps it out may have changed."""

GATE_SLACK = 1.0
"""Gate mode: seconds of kube-scheduler's work kept in hand beyond the next batch's expected
lead. Its QPS is the pipeline's limit, so an idle second costs a second of the whole run,
while a batch pinned a little early costs only a smaller batch (solves spread from 0.2 to
0.8 s for the same size on a loaded control plane)."""


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
    read: bool = True
    """Whether the step read the cluster (False: it knew without a snapshot that no batch
    was due)."""


@dataclass(frozen=True)
class Selection:
    """The batch a step solves, and how many shards were ready for it."""

    shards: list[str]
    members: Mapping[str, list[PodKey]]
    ready: int


class Holding:
    """Per-shard hold state between steps, and the choice of each batch."""

    def __init__(
        self,
        policy: Policy,
        config: BinderConfig,
        sizer: BatchSizer,
        enforcer: Enforcer,
        reporter: Reporter,
        read_seconds: Callable[[], float] = lambda: 0.0,
        handed_down: Callable[[], int] = lambda: 0,
    ) -> None:
        self.policy = policy
        self.config = config
        self.sizer = sizer
        self.enforcer = enforcer
        self.reporter = reporter
        self.read_seconds = read_seconds
        """What a fresh snapshot costs now: a batch's first write waits for it and its solve."""
        self.handed_down = handed_down
        """Gate mode: pins kube-scheduler has yet to bind (0 in bind mode, where the binder's
        own writes are the end of the pipeline)."""
        self.retry: dict[str, tuple[int, float]] = {}
        self.left_out: dict[str, int] = {}
        """Shards the solver left out, by how many solves in a row: the first says why at
        length, retries say it short (``to_explain``)."""
        self.in_flight: set[str] = set()
        """Shards handed to the enforcer whose outcome has not come back yet."""
        self.behind_writes: set[str] = set()
        """Shards the last ``select`` passed over, though allowed, because members of theirs
        were still in flight. The running loop decides before it takes in the writes that
        finished, so the wake-up of such a write may have been spent on the very step that
        passed the shard over: ``finish`` asks for the next step at once when it comes in."""
        self.window_opened: float | None = None
        self.noticed: dict[str, float] = {}
        """Ready shards by when a step first found them ready: batches take the oldest first."""

    def select(
        self,
        snapshot: Snapshot,
        ours: Mapping[PodKey, str],
        raw: Mapping[PodKey, dict[str, Any]],
        waited: Mapping[str, float],
        now: float,
        streaming: bool,
        report: StepReport,
        idle: float = IDLE_SECONDS,
    ) -> Selection | None:
        """Decide per shard, and return the batch due now, if one is.

        A batch is due when the batch window has passed since shards became ready, when they
        make a full batch, or, while ``streaming`` (batches are still being solved or bound),
        as soon as the enforcer would finish what it holds before this batch's solve would
        (``_runs_dry``): collecting longer would leave it idle. ``idle``: the longest wait when
        nothing is due.
        """
        shard_gangs = gangs(snapshot, set(ours.values()), waited)
        decisions = [decide(g, self.policy.permit) for g in shard_gangs]
        live = {g.shard for g in shard_gangs} | self.in_flight
        for kept in (self.retry, self.left_out):
            for shard in [s for s in kept if s not in live]:
                del kept[shard]  # placed (or gone) since: a later pod starts afresh
        report.decisions = decisions
        self.behind_writes = set()
        ready: list[str] = []
        wake = [idle]
        key_of = {name: key for key, name in ours.items()}
        members_by_shard = {g.shard: [key_of[p] for p in g.pending] for g in shard_gangs}
        for d in decisions:
            pods = members_by_shard.get(d.shard, [])
            if d.decision != "allow":
                self.reporter.note_decision(pods, raw, d.decision, d.reason)
                if d.recheck_in is not None:
                    wake.append(d.recheck_in)
                continue
            not_before = self.retry.get(d.shard, (0, now))[1]
            if not_before > now:
                wake.append(not_before - now)
                continue
            if d.shard in self.in_flight:
                self.behind_writes.add(d.shard)
                continue  # its other members are being written: wait for that outcome
            ready.append(d.shard)
        self.noticed = {s: self.noticed.get(s, now) for s in ready}
        report.next_step_in = max(0.0, min(wake))
        if not ready:
            self.window_opened = None
            return None
        ready.sort(key=lambda s: (self.noticed[s], s))  # the longest ready first
        wanted = self.sizer.pods
        ready_pods = sum(len(members_by_shard[s]) for s in ready)
        if self.window_opened is None:
            self.window_opened = now
        remaining = self._window_left(now, self.window_opened)
        # In gate mode kube-scheduler binds what is pinned: while it would sit idle (from the
        # first shard on), the ready shards go now, as a small batch, not after the window.
        gate = self.config.enforce == "gate"
        keeps_busy = (streaming or gate) and self._runs_dry(ready_pods)
        # A shard created member by member gets no company by waiting: its next member comes
        # only once this one runs, so a window would only hold up the whole chain.
        ordered = {g.shard for g in shard_gangs if g.ordered}
        only_ordered = all(s in ordered for s in ready)
        if ready_pods < wanted and remaining > 0 and not keeps_busy and not only_ordered:
            # Collect shards for the window, unless a full batch is there already, or the
            # pipeline is moving and the enforcer is about to run out of work: those shards
            # have waited behind the last batch, and more waiting would leave it idle.
            report.next_step_in = min(report.next_step_in, remaining)
            return None
        if self.enforcer.backlog_pods >= wanted:
            return None  # a whole batch still waits for the enforcer; its outcomes wake us
        self.window_opened = None
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
            self.reporter.note_decision(members_by_shard[shard], raw, "allow", "")
            self.noticed.pop(shard, None)
        return Selection(batch, members_by_shard, len(ready))

    def unread_wait(
        self,
        count_pending: Callable[[], int],
        now: float,
        streaming: bool,
        ordered: bool,
        read_at: float | None = None,
    ) -> float | None:
        """How long to sleep when ``select`` would surely find no batch due, so the snapshot
        need not be rebuilt to learn that; None when a batch may be due.

        Three cases. A whole batch still waits for the enforcer: no batch is due whatever the
        cluster holds, and the enforcer's next outcome wakes the loop (``IDLE_SECONDS``). Or an
        open batch window (one opens only once a step found shards ready) with fewer of our
        pending pods than a batch, ready or not (``count_pending``, asked only then), and the
        enforcer busy for longer than their solve would take: the rest of the window. Ordered
        shards skip the window, so while any are pending the second case never answers. Or,
        given ``read_at`` (when the running loop last read the cluster), none of our pods
        pending and a read less than ``QUIET_READ_SECONDS`` ago: until that interval ends (a
        pod of ours arriving wakes the loop, and is counted then).
        """
        if self.enforcer.backlog_pods >= self.sizer.pods:
            return IDLE_SECONDS
        if self.window_opened is None or ordered:
            if read_at is not None and now - read_at < QUIET_READ_SECONDS and not count_pending():
                return QUIET_READ_SECONDS - (now - read_at)
            return None
        remaining = self._window_left(now, self.window_opened)
        if remaining <= 0:
            return None
        pending_pods = count_pending()
        if pending_pods >= self.sizer.pods:
            return None
        if (streaming or self.config.enforce == "gate") and self._runs_dry(pending_pods):
            return None
        return remaining

    def _window_left(self, now: float, opened: float) -> float:
        return self.policy.permit.batch_window_seconds - (now - opened)

    def _runs_dry(self, ready_pods: int) -> bool:
        """Whether the enforcer finishes what it holds before the next batch's first write
        could follow: a fresh snapshot, then a solve of the ready pods, each at their recent
        cost, with a margin of half again for their spread. Then the next batch is read and
        solved now, so its writes follow without a gap: waiting for company would leave the
        enforcer idle while shards are ready (on the real API server such gaps were a third
        of a second between batches, before the snapshot's cost was counted).

        In gate mode the end of the pipeline is kube-scheduler, binding the pins at its QPS:
        it runs dry when the pins it holds and those being written are bound."""
        lead = self.read_seconds() + self.sizer.predict(ready_pods)
        if self.config.enforce == "gate":
            # The pins kube-scheduler holds, and those being written, keep it busy this long:
            # the next batch's pins must come before they run out, and may collect until then.
            waiting = self.handed_down() + self.enforcer.pending_pods
            drain = max(waiting / self.config.scheduler_qps, self.enforcer.drain_seconds() or 0.0)
            return drain <= LEAD_MARGIN * lead + GATE_SLACK
        if self.enforcer.backlog_pods == 0:
            return True
        drain_seconds = self.enforcer.drain_seconds()
        return drain_seconds is not None and drain_seconds <= LEAD_MARGIN * lead

    def finish(
        self, outcomes: Iterable[ShardOutcome], report: StepReport, now: float
    ) -> list[BaseException]:
        """Take in the shards the enforcer finished: retry the incomplete ones at once, and
        decide at once on the members that waited behind them (``behind_writes``)."""
        errors: list[BaseException] = []
        again = False
        for outcome in outcomes:
            if outcome.error is not None:
                errors.append(outcome.error)
            self.in_flight.discard(outcome.shard)
            if outcome.shard in self.behind_writes:
                self.behind_writes.discard(outcome.shard)
                again = True
            report.bound.extend(outcome.bound)
            report.failed.extend(outcome.failed)
            for name, _ in outcome.bound:
                namespace, _, pod = name.partition("/")
                self.reporter.forget((namespace, pod))
            if outcome.complete:
                self.retry.pop(outcome.shard, None)
                self.left_out.pop(outcome.shard, None)
            else:
                self.backoff(outcome.shard, now, immediate=True)
        if report.failed or again:
            report.next_step_in = 0.0
        else:
            retries = [t - now for _, t in self.retry.values() if t > now]  # past ones: no spin
            report.next_step_in = max(0.0, min([report.next_step_in, *retries]))
        return errors

    def leave_out(self, shard: str, now: float) -> None:
        """The solver left the shard out: retry it later, and count the refusal."""
        self.left_out[shard] = self.left_out.get(shard, 0) + 1
        self.backoff(shard, now)

    def to_explain(self, shards: Iterable[str]) -> frozenset[str]:
        """Of these shards, those whose conflict with the rest is worth explaining should the
        solver leave them out: never left out yet, or left out ``EXPLAIN_AGAIN`` times since
        they were last explained. Explaining builds and solves a model of its own, up to two
        seconds before the batch's first binding, and a shard that does not fit is retried
        every minute or sooner."""
        return frozenset(s for s in shards if self.left_out.get(s, 0) % EXPLAIN_AGAIN == 0)

    def retry_now(self) -> None:
        """The cluster answers again (or this binder leads again): the shards whose writes
        failed meanwhile are tried at the next step, not after the backoff their failures
        built up while nothing could be written. Shards the solver left out keep theirs."""
        for shard in [s for s in self.retry if s not in self.left_out]:
            del self.retry[shard]

    def backoff(self, shard: str, now: float, immediate: bool = False) -> None:
        attempts = self.retry.get(shard, (0, now))[0] + 1
        delay = self.config.retry_base_seconds * 2 ** (attempts - 1)
        if immediate and attempts == 1:
            delay = 0.0
        self.retry[shard] = (attempts, now + min(delay, self.config.retry_max_seconds))
