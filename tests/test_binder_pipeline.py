"""Fast enforcement and pipelining against the in-memory API server.

Bindings go out concurrently (bounded), carry the role and the batch in their annotations (no
other call per pod on the way), Events and role labels follow in the background and never hold
a binding up, and ``run`` solves the next batch while the last one is being bound, with every
decided pod already counted on its node.
"""

import copy
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from models.kube_objects import BATCH_ANNOTATION, ROLE_ANNOTATION, build_snapshot
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer.binder.background import BackgroundWrites, LaterText
from placer.binder.batching import BatchSizer
from placer.binder.loop import Binder, BinderConfig
from placer.kube.adapter import BindResult, EventType, PatchResult
from placer.kube.fake import FakeKubeAdapter
from solver.check import audit
from tests.kube_dicts import node, redis_pod

T0 = 1000.0
Annotations = Mapping[str, str] | None


def _nodes(count: int, zones: int = 3) -> list[dict[str, Any]]:
    return [node(f"n{i}", f"z{i % zones}", f"z{i % zones}-r{i}") for i in range(count)]


def _shards(count: int, size: int = 3, roles: bool = False) -> list[dict[str, Any]]:
    """Pending bind-mode shards; without ``roles`` the solver picks each shard's master."""
    return [
        redis_pod(
            f"c-{s}-{i}",
            "c",
            s,
            ("master" if i == 0 else "replica") if roles else None,
            schedulerName="redis-placer",
            annotations={"redis-placer.io/shard-size": str(size)},
        )
        for s in range(count)
        for i in range(size)
    ]


def _hard(fake: FakeKubeAdapter, policy: Policy) -> list[Any]:
    cluster = build_snapshot([*fake.list_nodes(), *fake.list_pods()], policy)
    return [v for v in audit(cluster, policy) if v.severity == "hard"]


class Calls:
    """Every write the binder sends, in order, with how many were in flight at once."""

    def __init__(self, fake: FakeKubeAdapter, delay: float = 0.0) -> None:
        self.fake = fake
        self.delay = delay
        self.log: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0

    def _enter(self, what: str, name: str) -> None:
        with self.lock:
            self.log.append((what, name))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        bind, label = self.fake.bind_pod, self.fake.patch_pod_labels

        def slow_bind(
            namespace: str, name: str, uid: str | None, target: str, annotations: Annotations = None
        ) -> BindResult:
            self._enter("bind", name)
            try:
                time.sleep(self.delay)
                return bind(namespace, name, uid, target, annotations)
            finally:
                self._leave()

        def recorded_label(
            namespace: str, name: str, labels: Mapping[str, str | None], rv: str | None = None
        ) -> PatchResult:
            with self.lock:
                self.log.append(("label", name))
            return label(namespace, name, labels, rv)

        monkeypatch.setattr(self.fake, "bind_pod", slow_bind)
        monkeypatch.setattr(self.fake, "patch_pod_labels", recorded_label)


# -- fast enforcement ------------------------------------------------------------------------


def test_bindings_go_out_concurrently_up_to_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKubeAdapter(nodes=_nodes(30), pods=_shards(10, roles=True))
    calls = Calls(fake, delay=0.05)
    calls.install(monkeypatch)
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy", concurrency=4))
    binder.step(now=T0)
    started = time.monotonic()
    report = binder.step(now=T0 + 1.5)
    took = time.monotonic() - started
    assert len(report.bound) == 30 and report.failed == []
    assert calls.most_in_flight == 4
    assert took < 30 * 0.05 * 0.6  # one at a time would take 1.5 s
    assert Counter(key for key, _ in fake.binds) == Counter(dict.fromkeys(fake.pods, 1))
    assert _hard(fake, Policy()) == []


def test_a_binding_is_the_only_call_on_the_way_and_carries_role_and_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No role-label patch before a Binding: the role rides in the Binding's annotations (the
    server copies them onto the pod); the label follows in the background."""
    fake = FakeKubeAdapter(nodes=_nodes(9), pods=_shards(2))
    calls = Calls(fake)
    calls.install(monkeypatch)
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    binder.step(now=T0)
    report = binder.step(now=T0 + 1.5)
    assert len(report.bound) == 6 and report.batch is not None
    first_label = next(i for i, (what, _) in enumerate(calls.log) if what == "label")
    assert [what for what, _ in calls.log[:first_label]] == ["bind"] * 6
    assert sorted(n for what, n in calls.log if what == "label") == sorted(p[1] for p in fake.pods)
    roles: Counter[str] = Counter()
    for pod in fake.pods.values():
        annotations = pod["metadata"]["annotations"]
        assert annotations[BATCH_ANNOTATION] == report.batch
        assert pod["metadata"]["labels"]["redis-role"] == annotations[ROLE_ANNOTATION]
        roles[annotations[ROLE_ANNOTATION]] += 1
    assert roles == Counter({"master": 2, "replica": 4})
    assert _hard(fake, Policy()) == []


def test_the_role_annotation_alone_tells_audit_the_roles() -> None:
    """A binder killed before its label writes leaves the role where audit reads it."""
    nodes = _nodes(3)
    pods = [
        redis_pod("c-0-0", "c", 0, None, node="n0", annotations={ROLE_ANNOTATION: "master"}),
        redis_pod("c-0-1", "c", 0, None, node="n1", annotations={ROLE_ANNOTATION: "replica"}),
        redis_pod(
            "c-0-2",
            "c",
            0,
            "replica",  # a label (rebalance after a failover) wins over the annotation
            node="n2",
            annotations={ROLE_ANNOTATION: "master"},
        ),
    ]
    snapshot = build_snapshot([*nodes, *pods], Policy())
    assert snapshot.issues == ()
    roles = {m.pod.name: m.role.value if m.role else None for m in snapshot.members}
    assert roles == {"c-0-0": "master", "c-0-1": "replica", "c-0-2": "replica"}
    bad = redis_pod("c-1-0", "c", 1, None, node="n0", annotations={ROLE_ANNOTATION: "boss"})
    (issue,) = build_snapshot([*nodes, bad], Policy()).issues
    assert issue.object == "pod default/c-1-0"
    assert f"annotation {ROLE_ANNOTATION}='boss'" in issue.message


def test_a_label_written_meanwhile_is_not_overwritten() -> None:
    """The background label is guarded by the resourceVersion it was computed from."""
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=_shards(1))
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    flush = binder.background.flush
    binder.background.flush = lambda: 0  # type: ignore[method-assign]
    binder.step(now=T0)
    report = binder.step(now=T0 + 1.5)
    assert len(report.bound) == 3
    master = next(
        k for k, p in fake.pods.items() if p["metadata"]["annotations"][ROLE_ANNOTATION] == "master"
    )
    binder.cache.poll(0)  # the cache has the bound pods, without a role label
    assert fake.patch_pod_labels(*master, {"redis-role": "replica"}).ok  # rebalance relabels
    assert flush() == 3 + 3 + 1  # Scheduled events, labels, and the refused label re-read
    labels = {k[1]: p["metadata"]["labels"]["redis-role"] for k, p in fake.pods.items()}
    assert labels[master[1]] == "replica"
    assert sorted(labels.values()) == ["replica"] * 3


def test_role_labels_a_stopped_binder_left_unsent_are_written_by_the_next_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A binder stopped before its background writes leaves the roles in the annotations its
    Bindings carried: the binder that leads next labels those pods from them, and only those."""
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=_shards(1))
    first = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    first.background.flush = lambda: 0  # type: ignore[method-assign]  # all left queued
    first.step(now=T0)
    assert len(first.step(now=T0 + 1.5).bound) == 3
    sent, left = first.background.stop(drain_seconds=0.0)  # stopped with nothing sent
    assert sent == 0 and left == 3 + 3  # a Scheduled Event and a role label a pod
    assert all("redis-role" not in p["metadata"]["labels"] for p in fake.pods.values())
    fake.add_pod(redis_pod("o-0-0", "o", 0, "replica", node="n5"))  # labelled by its deployment
    patched: list[str] = []
    patch = fake.patch_pod_labels

    def counted(namespace: str, name: str, *args: Any, **kwargs: Any) -> PatchResult:
        patched.append(name)
        return patch(namespace, name, *args, **kwargs)

    monkeypatch.setattr(fake, "patch_pod_labels", counted)
    second = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    second.step(now=T0 + 10)  # takes over: reads everything, then labels what needs it
    second.background.flush()
    assert sorted(patched) == ["c-0-0", "c-0-1", "c-0-2"]
    for pod in fake.pods.values():
        meta = pod["metadata"]
        role = (meta.get("annotations") or {}).get(ROLE_ANNOTATION, "replica")
        assert meta["labels"]["redis-role"] == role


def test_events_never_hold_up_a_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the API server slow to take Events, ``run`` binds everything before any lands."""
    fake = FakeKubeAdapter(nodes=_nodes(12), pods=_shards(4))
    released = threading.Event()
    record = fake.record_event

    def stuck(
        pod: Mapping[str, Any],
        reason: str,
        message: str,
        type: EventType = "Normal",
        component: str = "redis-placer",
        count: int = 1,
    ) -> bool:
        released.wait(20)
        return record(pod, reason, message, type, component, count)

    monkeypatch.setattr(fake, "record_event", stuck)
    policy = Policy.model_validate({"permit": {"batchWindowSeconds": 0.1}})
    binder = Binder(fake, policy, BinderConfig(solver="greedy"))
    stop = threading.Event()
    loop = threading.Thread(target=binder.run, args=(stop,), daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 15
        while len(fake.binds) < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(fake.binds) == 12
        assert fake.events == []
    finally:
        released.set()
        stop.set()
        loop.join(timeout=30)
    assert not loop.is_alive()
    assert Counter(e["reason"] for e in fake.events) == Counter(Scheduled=12)


def test_background_writes_fold_repeats_and_count_what_they_drop() -> None:
    fake = FakeKubeAdapter()
    dropped: list[str] = []
    writes = BackgroundWrites(fake, max_queued=2, on_drop=dropped.append)
    pod = redis_pod("p", "c", 0, None)
    pod["metadata"]["uid"] = "u1"
    writes.event(pod, "FailedScheduling", "first", "Warning")
    writes.event(pod, "FailedScheduling", "second", "Warning")
    writes.event(pod, "Scheduled", "placed")
    writes.event(redis_pod("q", "c", 0, None), "Scheduled", "placed")
    assert writes.queued == 2 and dropped == ["event"] and writes.dropped == 1
    assert writes.flush() == 2
    folded, placed = fake.events
    assert (folded["reason"], folded["message"], folded["count"]) == (
        "FailedScheduling",
        "second",
        2,
    )
    assert (placed["reason"], placed["count"]) == ("Scheduled", 1)


def test_an_event_message_that_takes_a_verdict_is_made_once_when_it_is_sent() -> None:
    """A batch's summary is made by the thread that sends its first Event, not before the
    batch's first write, and once for every pod of the batch."""
    fake = FakeKubeAdapter()
    made: list[str] = []

    def summary() -> str:
        made.append(threading.current_thread().name)
        return "survives losing a zone"

    text = LaterText(summary)
    writes = BackgroundWrites(fake)
    for i in range(3):
        writes.event(redis_pod(f"p{i}", "c", 0, None), "Scheduled", text)
    assert made == [] and fake.events == []
    sender = threading.Thread(target=writes.flush, name="sender")
    sender.start()
    sender.join(timeout=10)
    assert made == ["sender"]
    assert [e["message"] for e in fake.events] == ["survives losing a zone"] * 3


def test_background_writes_slow_down_while_bindings_are_in_flight() -> None:
    fake = FakeKubeAdapter()
    busy = [True]
    writes = BackgroundWrites(fake, qps=200, burst=1, busy_qps=2, busy=lambda: busy[0])
    for i in range(20):
        writes.event(redis_pod(f"p{i}", "c", 0, None), "Scheduled", "placed")
    writes.start()
    try:
        time.sleep(1.0)
        slow = len(fake.events)
        assert 1 <= slow <= 4  # 2 a second while busy (and the one token it started with)
        busy[0] = False
        deadline = time.monotonic() + 5
        while len(fake.events) < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(fake.events) == 20
    finally:
        writes.stop()


def test_stopping_sends_what_the_rate_limit_deferred_and_says_what_it_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A burst leaves most of its Events and labels queued behind the rate limit: stopping
    sends them unthrottled, within its drain time, and logs what it sent and what it left."""
    fake = FakeKubeAdapter()
    writes = BackgroundWrites(fake, qps=1, burst=1)
    for i in range(6):
        writes.event(redis_pod(f"p{i}", "c", 0, None), "Scheduled", "placed")
    with caplog.at_level(logging.INFO, logger="placer.binder.background"):
        assert writes.stop(drain_seconds=5.0) == (6, 0)
    assert len(fake.events) == 6
    assert "background writes at shutdown: 6 sent" in caplog.text
    assert "0 left unsent" in caplog.text

    late = BackgroundWrites(fake)
    for i in range(3):
        late.event(redis_pod(f"q{i}", "c", 0, None), "Scheduled", "placed")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="placer.binder.background"):
        assert late.stop(drain_seconds=0.0) == (0, 3)
    assert len(fake.events) == 6
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "3 left unsent" in caplog.text

    idle = BackgroundWrites(fake)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="placer.binder.background"):
        assert idle.stop() == (0, 0)
    assert caplog.text == ""  # nothing queued: nothing to say


# -- batch sizing ----------------------------------------------------------------------------


def test_batch_size_follows_the_solver_speed() -> None:
    sizer = BatchSizer(target_seconds=1.0, max_pods=600)
    assert sizer.pods == 500  # the first guess: 2 ms a pod
    sizer.observe(100, 1.0, "OPTIMAL", budget=5.0)  # 10 ms a pod
    assert sizer.pods == 100
    sizer.observe(100, 0.5, "FEASIBLE", budget=5.0)  # 5 ms: halfway there
    assert sizer.pods == int(1.0 / 0.0075)
    for _ in range(5):
        sizer.observe(1000, 0.1, "OPTIMAL", budget=5.0)  # 0.1 ms a pod
    assert sizer.pods == 600  # capped
    with pytest.raises(ValueError):
        BatchSizer(target_seconds=0)


def test_a_fixed_cost_per_solve_makes_batches_larger_not_smaller() -> None:
    """On a large running cluster most of a small solve is its fixed cost: batches that follow
    the per-pod average alone shrink towards one shard, each paying that cost again."""
    sizer = BatchSizer(target_seconds=1.0, max_pods=600)
    sizer.observe(250, 0.80, "OPTIMAL", budget=5.0)  # 3.2 ms a pod on average
    assert sizer.pods == 312  # one size seen: the average is all there is to go by
    sizer.observe(156, 0.70, "OPTIMAL", budget=5.0)  # about 0.53 s fixed, 1.1 ms a pod
    line = sizer.cost_line()
    assert line is not None
    fixed, per_pod = line
    assert fixed == pytest.approx(0.534, abs=0.001) and per_pod == pytest.approx(0.00106, abs=1e-5)
    # The fixed cost is past half the target: a batch whose own pods cost as much again.
    assert sizer.pods == 502
    # Costs that grow with the batch and nothing fixed: the average decides, as before.
    plain = BatchSizer(target_seconds=1.0, max_pods=600)
    plain.observe(50, 0.25, "OPTIMAL", budget=5.0)
    plain.observe(100, 0.5, "OPTIMAL", budget=5.0)
    assert plain.cost_line() is None and plain.pods == 200
    # A fixed cost well inside the target leaves the rest of the target to the pods.
    quick = BatchSizer(target_seconds=1.0, max_pods=600)
    quick.observe(100, 0.3, "OPTIMAL", budget=5.0)
    quick.observe(200, 0.5, "OPTIMAL", budget=5.0)  # 0.1 s fixed, 2 ms a pod
    assert quick.pods == 450
    # Solves of many sizes that all cost about the same: the largest that went well.
    flat = BatchSizer(target_seconds=0.5, max_pods=600)
    for pods, seconds in [(99, 0.47), (105, 0.43), (42, 0.86), (21, 0.52), (9, 0.49)]:
        flat.observe(pods, seconds, "OPTIMAL", budget=5.0)
    assert flat.cost_line() == (pytest.approx(0.554), 0.0)
    assert flat.pods == flat.most == 600  # nothing has gone badly: the largest batch
    # Every solve, the smallest too, longer than the target: shrinking cannot meet it.
    slow = BatchSizer(target_seconds=0.5, max_pods=600)
    slow.observe(99, 0.69, "OPTIMAL", budget=5.0)
    slow.observe(69, 0.51, "OPTIMAL", budget=5.0)
    assert slow.cost_line() == (0.51, 0.0) and slow.pods == 600


def test_a_solve_out_of_budget_sizes_by_the_answer_it_got() -> None:
    """The budget says nothing of speed; the answer says whether the batch was too large."""
    sizer = BatchSizer(target_seconds=1.0, max_pods=600)
    sizer.observe(100, 1.0, "OPTIMAL", budget=5.0)
    assert sizer.pods == 100
    # A good answer at the budget: the next batch costs the budget anyway, so no smaller.
    sizer.observe(200, 5.1, "FEASIBLE", budget=5.0, objective=100, bound=97)
    assert sizer.pods == 200 and sizer.seconds_per_pod == 0.01
    # Nothing of CP-SAT's own, or far from the bound: too large for the budget, halve.
    sizer.observe(200, 5.2, "UNKNOWN", budget=5.0)
    assert sizer.pods == 100
    sizer.observe(100, 5.0, "FEASIBLE", budget=5.0, objective=1000, bound=200)
    assert sizer.pods == 50
    # Solved within the budget again: speed decides, and the limit grows back.
    sizer.observe(50, 0.25, "OPTIMAL", budget=5.0)
    assert sizer.pods == 100  # twice the last good batch at most, then the average
    sizer.observe(100, 0.5, "OPTIMAL", budget=5.0)
    assert sizer.seconds_per_pod == 0.00625 and sizer.pods == 160  # below the limit of 200


# -- pipelining ------------------------------------------------------------------------------


def _timeline(
    binder: Binder, monkeypatch: pytest.MonkeyPatch, solve_seconds: float = 0.0
) -> tuple[list[tuple[float, float, Snapshot]], list[float]]:
    """(start, end, batch) of every solve (taking at least ``solve_seconds``), and the time of
    every bind that landed."""
    solves: list[tuple[float, float, Snapshot]] = []
    binds: list[float] = []
    solve = binder._solve

    def timed(snapshot: Snapshot) -> Plan:
        started = time.monotonic()
        plan = solve(snapshot)
        time.sleep(max(0.0, solve_seconds - (time.monotonic() - started)))
        solves.append((started, time.monotonic(), snapshot))
        return plan

    bind = binder.adapter.bind_pod

    def slow(
        namespace: str, name: str, uid: str | None, target: str, annotations: Annotations = None
    ) -> BindResult:
        time.sleep(0.03)
        result = bind(namespace, name, uid, target, annotations)
        binds.append(time.monotonic())
        return result

    monkeypatch.setattr(binder, "_solve", timed)
    monkeypatch.setattr(binder.adapter, "bind_pod", slow)
    return solves, binds


def _run_until(binder: Binder, done: Callable[[], bool], timeout: float = 30) -> None:
    stop = threading.Event()
    loop = threading.Thread(target=binder.run, args=(stop,), daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop.set()
        loop.join(timeout=30)
    assert not loop.is_alive()


def test_run_solves_the_next_batch_while_the_last_is_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeKubeAdapter(nodes=_nodes(36), pods=_shards(12))
    policy = Policy.model_validate({"permit": {"batchWindowSeconds": 0.05}})
    config = BinderConfig(solver="greedy", concurrency=2, max_batch_pods=6)
    binder = Binder(fake, policy, config)
    solves, binds = _timeline(binder, monkeypatch, solve_seconds=0.1)
    _run_until(binder, lambda: len(fake.binds) == 36)
    assert Counter(key for key, _ in fake.binds) == Counter(dict.fromkeys(fake.pods, 1))
    assert len(solves) >= 6  # batches of at most two shards
    assert all(sum(1 for m in s.members if m.pod.pending) <= 6 for _, _, s in solves)
    # Bindings landed while later batches were being solved.
    during = [b for start, end, _ in solves[1:] for b in binds if start < b < end]
    assert len(during) >= 6, (solves, binds)  # at least a batch's worth
    assert _hard(fake, policy) == []


def test_a_decided_pod_counts_on_its_node_before_its_binding_lands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each solve sees every earlier batch's pods on their nodes, bound or still in flight: on
    nodes that take one master each, no master lands beside another."""
    fake = FakeKubeAdapter(nodes=_nodes(9), pods=_shards(3))
    policy = Policy.model_validate({"permit": {"batchWindowSeconds": 0.05}})
    binder = Binder(fake, policy, BinderConfig(solver="greedy", concurrency=1, max_batch_pods=3))
    solves, _ = _timeline(binder, monkeypatch)
    _run_until(binder, lambda: len(fake.binds) == 9)
    assert len(solves) == 3
    for i, (_, _, snapshot) in enumerate(solves):
        placed = [m for m in snapshot.members if not m.pod.pending]
        assert len(placed) == 3 * i, i  # earlier batches, all on a node
    masters = Counter(
        p["spec"]["nodeName"]
        for p in fake.pods.values()
        if p["metadata"]["annotations"][ROLE_ANNOTATION] == "master"
    )
    assert max(masters.values()) == 1
    assert _hard(fake, policy) == []


def test_a_failed_binding_gives_the_pod_back_to_the_next_solve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=_shards(1))
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    bind = fake.bind_pod
    fail = [True]

    def flaky(
        namespace: str, name: str, uid: str | None, target: str, annotations: Annotations = None
    ) -> BindResult:
        if fail[0] and name == "c-0-1":
            from placer.kube.adapter import BindOutcome

            return BindResult(BindOutcome.ERROR, 500, "etcdserver: request timed out")
        return bind(namespace, name, uid, target, annotations)

    monkeypatch.setattr(fake, "bind_pod", flaky)
    binder.step(now=T0)
    report = binder.step(now=T0 + 1.5)
    assert [n for n, _ in report.bound] == ["default/c-0-0"]
    assert [n for n, _ in report.failed] == ["default/c-0-1"]
    bound_to = fake.pods[("default", "c-0-0")]["spec"]["nodeName"]
    assert binder.cache.pods[("default", "c-0-0")]["spec"]["nodeName"] == bound_to
    for key in (("default", "c-0-1"), ("default", "c-0-2")):  # the failed pod and the one after
        assert "nodeName" not in binder.cache.pods[key]["spec"]
    fail[0] = False
    binder.cache.poll(0)
    binder.step(now=T0 + 1.5)
    again = binder.step(now=T0 + 3.0)
    assert sorted(n for n, _ in again.bound) == ["default/c-0-1", "default/c-0-2"]
    assert _hard(fake, Policy()) == []


def test_nothing_goes_to_a_node_cordoned_after_the_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=_shards(1))
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    binder.follow_nodes = True  # as run() does: the node watch brings the cordon
    solve = binder._solve
    cordoned: list[str] = []

    def solve_then_cordon(snapshot: Snapshot) -> Plan:
        plan = solve(snapshot)
        if not cordoned:
            target = sorted(a.node for a in plan.assignments if a.node)[-1]
            fake.update_node(target, lambda n: n["spec"].update(unschedulable=True))
            binder.cache.poll_nodes(0)
            cordoned.append(target)
        return plan

    monkeypatch.setattr(binder, "_solve", solve_then_cordon)
    binder.step(now=T0)
    report = binder.step(now=T0 + 1.5)
    assert report.failed and any(
        f"node {cordoned[0]} is cordoned" in why for _, why in report.failed
    )
    errors = binder.metrics.registry.get_sample_value(
        "redis_placer_bind_errors_total", {"reason": "node_cordoned"}
    )
    assert errors == len(report.failed)
    binder.cache.poll(0)
    binder.step(now=T0 + 1.5)
    binder.step(now=T0 + 3.0)
    assert len(fake.binds) == 3
    assert cordoned[0] not in {target for _, target in fake.binds}
    assert _hard(fake, Policy()) == []


def test_run_places_a_large_arrival_in_pipelined_batches_without_hard_violations() -> None:
    """Shards arriving while the binder runs, batch after batch, every pod bound once."""
    policy = Policy.model_validate({"permit": {"batchWindowSeconds": 0.1}})
    fake = FakeKubeAdapter(nodes=_nodes(45))
    binder = Binder(fake, policy, BinderConfig(solver="greedy", max_batch_pods=9))
    arrivals = _shards(15)
    stop = threading.Event()
    loop = threading.Thread(target=binder.run, args=(stop,), daemon=True)
    loop.start()
    try:
        for pod in arrivals:
            fake.add_pod(copy.deepcopy(pod))
            time.sleep(0.005)
        deadline = time.monotonic() + 30
        while len(fake.binds) < 45 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        loop.join(timeout=30)
    assert Counter(key for key, _ in fake.binds) == Counter(dict.fromkeys(fake.pods, 1))
    assert _hard(fake, policy) == []
    batches = Counter(p["metadata"]["annotations"][BATCH_ANNOTATION] for p in fake.pods.values())
    assert len(batches) >= 5 and max(batches.values()) <= 9


def test_a_placed_pod_drops_its_still_queued_waiting_event() -> None:
    fake = FakeKubeAdapter()
    writes = BackgroundWrites(fake)
    pod = redis_pod("p", "c", 0, None)
    writes.event(pod, "WaitingForShard", "1 of 3 members present")
    writes.event(redis_pod("q", "c", 0, None), "WaitingForShard", "2 of 3 members present")
    writes.event(pod, "Scheduled", "placed", supersedes=(("WaitingForShard", "Normal"),))
    writes.flush()
    assert [(e["involvedObject"]["name"], e["reason"]) for e in fake.events] == [
        ("q", "WaitingForShard"),
        ("p", "Scheduled"),
    ]


def test_a_backlog_gets_batches_as_large_as_the_solver_handles_in_its_budget() -> None:
    sizer = BatchSizer(target_seconds=0.5, max_pods=600)
    sizer.observe(30, 0.6, "OPTIMAL", budget=5.0)  # 20 ms a pod
    assert sizer.pods == 25 and sizer.most == 600
    sizer.observe(600, 5.2, "UNKNOWN", budget=5.0)  # nothing of CP-SAT's own: too large
    assert sizer.most == 300
    sizer.observe(300, 3.0, "OPTIMAL", budget=5.0)  # in time again: the limit grows back
    assert sizer.most == 600
