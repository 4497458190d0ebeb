"""Latency under a burst: the next batch is solved in time for the enforcer to go on writing,
and a step that cannot solve anything does not rebuild the snapshot."""

import threading
import time
from typing import Any

import pytest

from models.policy import Policy
from placer.binder.batching import BatchSizer
from placer.binder.enforce import Enforcer, Placement, ShardJob, ShardOutcome
from placer.binder.holding import EXPLAIN_AGAIN, Holding, StepReport
from placer.binder.loop import Binder, BinderConfig
from placer.kube.fake import FakeKubeAdapter
from tests.kube_dicts import node, other_pod, redis_pod, snapshot


def _job(shard: str, pods: int) -> ShardJob:
    placements = tuple(
        Placement(("ns", f"{shard}-{i}"), {}, f"node-{i}", "replica") for i in range(pods)
    )
    return ShardJob(shard, "b-1", placements, "")


def test_the_drain_estimate_follows_the_pace_of_written_shards() -> None:
    enforcer = Enforcer(concurrency=2)
    assert enforcer.drain_seconds() is None  # nothing written yet: no pace to go by

    def slow(job: ShardJob) -> ShardOutcome:
        time.sleep(0.1)
        return ShardOutcome(job.shard, job.batch)

    enforcer.submit(_job("s0", 2), slow)
    assert enforcer.wait(timeout=5)
    assert enforcer.drain_seconds() == 0.0  # nothing left to write
    release = threading.Event()

    def held(job: ShardJob) -> ShardOutcome:
        release.wait(5)
        return ShardOutcome(job.shard, job.batch)

    for shard in ("s1", "s2", "s3", "s4"):
        enforcer.submit(_job(shard, 3), held)
    drain = enforcer.drain_seconds()
    # 12 pods at about 0.05 s a pod (0.1 s for 2) on 2 threads.
    assert drain is not None and 0.25 <= drain <= 0.6, drain
    release.set()
    assert enforcer.wait(timeout=5)


def test_a_solve_is_predicted_from_the_fitted_cost_line() -> None:
    sizer = BatchSizer(target_seconds=0.5, max_pods=600)
    assert sizer.predict(100) == pytest.approx(100 * sizer.seconds_per_pod)
    sizer.observe(100, 0.3, "OPTIMAL", budget=5.0)
    sizer.observe(300, 0.5, "OPTIMAL", budget=5.0)  # 0.2 s fixed, 1 ms a pod
    assert sizer.predict(200) == pytest.approx(0.4)


class _Busy:
    """An enforcer still writing ``backlog`` pods, done in ``drain`` seconds."""

    def __init__(self, backlog: int, drain: float | None) -> None:
        self.backlog_pods = backlog
        self.pending_pods = backlog
        self._drain = drain

    def drain_seconds(self) -> float | None:
        return self._drain


class _Quiet:
    def note_decision(self, *args: Any, **kwargs: Any) -> None:
        pass


def _holding(
    enforcer: Any,
    sizer: BatchSizer,
    read_seconds: float = 0.0,
    config: BinderConfig | None = None,
    pinned: int = 0,
) -> Holding:
    policy = Policy.model_validate({"permit": {"batchWindowSeconds": 10}})
    return Holding(
        policy,
        config or BinderConfig(),
        sizer,
        enforcer,
        _Quiet(),  # type: ignore[arg-type]
        read_seconds=lambda: read_seconds,
        handed_down=lambda: pinned,
    )


def _ready(count: int) -> tuple[Any, dict[Any, str], dict[Any, dict[str, Any]]]:
    pods = [redis_pod(f"c-{s}-{r}", "c", s, None) for s in range(count) for r in range(3)]
    nodes = [node(f"n{i}", "abc"[i % 3], f"r{i % 2}") for i in range(12)]
    snap = snapshot(nodes, pods, policy=Policy())
    ours = {("default", p["metadata"]["name"]): f"default/{p['metadata']['name']}" for p in pods}
    raw = {key: p for key, p in zip(ours, pods, strict=True)}
    return snap, ours, raw


@pytest.mark.parametrize(
    ("drain", "due"),
    [(0.1, True), (5.0, False), (None, False)],
    ids=["drains-before-the-solve", "drains-after-the-solve", "pace-unknown"],
)
def test_a_batch_is_due_once_the_enforcer_would_run_dry_during_its_solve(
    drain: float | None, due: bool
) -> None:
    sizer = BatchSizer(target_seconds=2.0, max_pods=600)
    sizer.observe(30, 3.0, "OPTIMAL", budget=5.0)  # 0.1 s a pod: batches of 20, 6 take 0.6 s
    assert sizer.pods == 20
    holding = _holding(_Busy(backlog=6, drain=drain), sizer)
    snap, ours, raw = _ready(2)
    waited = dict.fromkeys(ours.values(), 0.0)
    report = StepReport()
    selection = holding.select(snap, ours, raw, waited, 0.0, True, report)
    assert (selection is not None) is due


@pytest.mark.parametrize(
    ("pinned", "due"),
    [(0, True), (5, True), (300, False)],
    ids=["kube-scheduler-idle", "a-few-pins-left", "seconds-of-pins-queued"],
)
def test_gate_mode_pins_at_once_while_kube_scheduler_would_run_dry(pinned: int, due: bool) -> None:
    """Gate mode, nothing being written: the first shards are solved at once, not after the
    window, while kube-scheduler holds too few pins (at 50 a second) to outlast the next
    batch's solve; 300 pins (6 s of its work) leave time to collect a larger batch."""
    sizer = BatchSizer(target_seconds=2.0, max_pods=600)
    sizer.observe(30, 3.0, "OPTIMAL", budget=5.0)
    config = BinderConfig(enforce="gate")
    holding = _holding(_Busy(backlog=0, drain=None), sizer, config=config, pinned=pinned)
    snap, ours, raw = _ready(2)
    waited = dict.fromkeys(ours.values(), 0.0)
    selection = holding.select(snap, ours, raw, waited, 0.0, False, StepReport())
    assert (selection is not None) is due


@pytest.mark.parametrize(
    ("read_seconds", "due"),
    [(0.0, False), (0.5, True)],
    ids=["solve-alone-fits-in-the-drain", "read-and-solve-outlast-the-drain"],
)
def test_the_snapshot_counts_in_the_lead_before_the_enforcer_runs_dry(
    read_seconds: float, due: bool
) -> None:
    """1.5 s of writes left; the solve of the ready pods takes 0.6 s. Alone (with the margin,
    0.9 s) it would finish long before the writes: wait for company. With a 0.5 s snapshot
    first (1.65 s) the enforcer would stand idle: solve now."""
    sizer = BatchSizer(target_seconds=2.0, max_pods=600)
    sizer.observe(30, 3.0, "OPTIMAL", budget=5.0)
    holding = _holding(_Busy(backlog=6, drain=1.5), sizer, read_seconds=read_seconds)
    snap, ours, raw = _ready(2)
    waited = dict.fromkeys(ours.values(), 0.0)
    selection = holding.select(snap, ours, raw, waited, 0.0, True, StepReport())
    assert (selection is not None) is due


def test_a_step_behind_a_full_enforcer_does_not_rebuild_the_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = [node(f"n{i}", "abc"[i % 3], f"r{i % 2}") for i in range(12)]
    pods = [
        redis_pod(f"c-{s}-{r}", "c", s, None, schedulerName="redis-placer")
        for s in range(2)
        for r in range(3)
    ]
    policy = Policy.model_validate({"permit": {"batchWindowSeconds": 0}})
    binder = Binder(FakeKubeAdapter(nodes=nodes, pods=pods), policy, BinderConfig())
    assert len(binder.step(now=0.0).bound) == 6  # lists the cluster, places both shards
    reads = binder.reader.reads
    monkeypatch.setattr(type(binder.enforcer), "backlog_pods", property(lambda _: 10_000))
    report = binder._plan(1.0, streaming=True)
    assert binder.reader.reads == reads and report.solve_status is None
    monkeypatch.undo()
    binder._plan(2.0, streaming=True)
    assert binder.reader.reads == reads + 1  # the cache changed since: read again


def test_a_step_inside_the_window_with_too_few_pods_for_a_batch_waits_unread() -> None:
    sizer = BatchSizer(target_seconds=2.0, max_pods=600)
    sizer.observe(30, 3.0, "OPTIMAL", budget=5.0)  # batches of 20 pods, 0.1 s a pod
    holding = _holding(_Busy(backlog=6, drain=5.0), sizer)
    assert holding.unread_wait(lambda: 6, 0.0, True, False) is None  # no window open yet
    holding.window_opened = 0.0
    assert holding.unread_wait(lambda: 6, 4.0, True, False) == pytest.approx(6.0)
    assert holding.unread_wait(lambda: 20, 4.0, True, False) is None  # a full batch may be ready
    assert holding.unread_wait(lambda: 6, 10.0, True, False) is None  # the window has passed
    assert holding.unread_wait(lambda: 6, 4.0, True, True) is None  # ordered shards never wait
    quick = _holding(_Busy(backlog=6, drain=0.1), sizer)
    quick.window_opened = 0.0
    assert quick.unread_wait(lambda: 6, 4.0, True, False) is None  # the enforcer runs dry first


def test_while_none_of_ours_is_pending_the_running_loop_reads_at_most_once_a_second() -> None:
    """Gate mode's kube-scheduler binds the pins fifty a second, each an event of a pod that
    is not ours to place: a quiet step knows that from the cache, without a snapshot."""
    nodes = [node(f"n{i}", "abc"[i % 3], f"r{i % 2}") for i in range(12)]
    shard = [redis_pod(f"c-0-{r}", "c", 0, None, schedulerName="redis-placer") for r in range(3)]
    fake = FakeKubeAdapter(nodes=nodes, pods=shard)
    binder = Binder(fake, Policy.model_validate({"permit": {"batchWindowSeconds": 0}}))
    assert len(binder.step(now=0.0).bound) == 3
    binder._plan(0.0, quiet=True)  # reads what the step bound
    reads = binder.reader.reads
    fake.add_pod(other_pod("o1", "n0", "100m", "64Mi"))  # another pod's event
    binder.cache.poll(0)
    report = binder._plan(0.4, quiet=True)
    assert binder.reader.reads == reads and not report.read
    assert report.next_step_in == pytest.approx(0.6)  # until a second has passed
    assert binder._plan(0.5).read and binder.reader.reads == reads + 1  # a step by hand reads
    fake.add_pod(other_pod("o2", "n1", "100m", "64Mi"))
    binder.cache.poll(0)
    assert not binder._plan(0.9, quiet=True).read
    binder._plan(1.6, quiet=True)  # a second after the last read: read again
    assert binder.reader.reads == reads + 2
    for r in range(3):  # a pod of ours is read at once, however recent the last read
        fake.add_pod(redis_pod(f"c-1-{r}", "c", 1, None, schedulerName="redis-placer"))
    binder.cache.poll(0)
    report = binder._plan(1.7, quiet=True)
    assert report.read and binder.reader.reads == reads + 3 and report.solve_status is not None


def test_a_shard_is_explained_on_its_first_refusal_every_tenth_and_afresh_once_placed() -> None:
    holding = _holding(_Busy(0, None), BatchSizer(target_seconds=0.5, max_pods=600))
    assert holding.to_explain(["c/0", "c/1"]) == {"c/0", "c/1"}
    holding.leave_out("c/0", now=10.0)
    assert holding.to_explain(["c/0", "c/1"]) == {"c/1"}
    for _ in range(EXPLAIN_AGAIN - 1):
        holding.leave_out("c/0", now=10.0)
    assert holding.to_explain(["c/0"]) == {"c/0"}
    holding.leave_out("c/0", now=10.0)
    assert holding.to_explain(["c/0"]) == frozenset()
    holding.in_flight.add("c/0")  # then it fit, and its pods were bound
    holding.finish([ShardOutcome("c/0", "b-2")], StepReport(), now=20.0)
    assert holding.to_explain(["c/0"]) == {"c/0"}
