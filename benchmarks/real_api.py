"""Benchmark: the binder and the stock kube-scheduler on a real API server, in one run.

    KUBEBUILDER_ASSETS=/path/to/binaries python -m benchmarks.real_api --nodes 1000 --shards 500
        [--members 3] [--creators 16] [--runs stock,bind,gate,raw] [--raw-pods 600]
        [--binder-arg=--solver=greedy ...] [--workdir DIR] [--profile DIR] [--plane-per-run]
        [--rounds N] [--placer-cpus 1]

The control plane of the end-to-end tests (etcd, kube-apiserver, kube-scheduler from
``KUBEBUILDER_ASSETS``) is started, ``--nodes`` Ready nodes are created (three zones, racks of
ten; allocatable and the Ready condition set through the status subresource, the not-ready
taint removed), and then, each alone on the same plane (the pods of one run are deleted before
the next, and each starts once the plane and its placer use less than a quarter of a core;
with ``--plane-per-run`` each mode has a plane of its own, started afresh, so no mode works on
what an earlier one left in etcd and the API server's caches):

- ``stock``: kube-scheduler at its default client QPS places the Redis pods, each given the
  strongest per-pod rules a user can write for what the binder guarantees: required pod
  anti-affinity on the hostname for members of the same shard (shard-spread), preferred pod
  anti-affinity on the zone (weight 100) and the rack (weight 50) for members of the same shard
  (replica-separation), and for masters (labelled ``redis-role: master``, the first member of
  each shard) required anti-affinity on the hostname against every master (master-exclusivity)
  and a zone topology spread constraint, maxSkew 1, DoNotSchedule (master balance);
- ``bind``: ``redis-placer binder`` (a subprocess, as deployed, leader-elected) binds the pods;
  they carry no role label (the solver picks each shard's master) and no affinity;
- ``gate``: the pods are created with the placement gate, the binder pins them and lifts the
  gate, kube-scheduler binds them;
- ``backlog``: bind mode on pods that exist before the binder does: every pod is created first,
  then the binder is started (a binder back after an outage, or a new leader, finding a
  backlog); its pods/s count from the moment its log says it took the Lease, so the creators
  share no second of it with the binder, and weigh it against the API server's own Binding rate
  with nothing else running;
- ``trivial``: ``benchmarks.trivial_binder``, a process that binds each pod the moment its watch
  shows it (round-robin over the nodes, 32 threads, no decision): the most any placer in its
  own process can do with this arrival;
- ``raw``: the API server's own rates: ``--raw-pods`` pods pre-created with a scheduler name
  nobody serves (the create rate), then a Binding POSTed for each through the kubernetes client
  (the adapter's ``bind_pod``) with 1, 8 and 32 threads, nothing else running.

Pods are created shard by shard (master first) by ``--creators`` threads. A watch records when
each pod gets its node. Printed, per run: pods/s from the first create to the last bind, the
time to the first bind, p50/p90/p99 from a shard's last pod created to its first bind, hard
and soft violations of the result by the independent checker (``solver.check.audit``), the
worst single-zone and single-rack master loss, the load average at start and end, the CPU
seconds each process used, and the requests the API server served in that time by verb and
resource. Then the placer's CPU seconds from the first create until it exited: stopped after
the last bind, the binder sends the Events and role labels its rate limit deferred (20 a
second, 2 while bindings are in flight), so this counts them, which the window to the last
bind does not. Then what the runs compare when both sides ran: gate mode's pods/s and shard
p50 against the stock scheduler's, bind mode's pods/s against the stock scheduler's and as a
share of the raw run's Binding rate at each thread count, and the binder's CPU beyond the
no-decision placer's, a pod. Last, every violation the checker found, each with the binder
batch that placed its pods (their batch annotation).
``--rounds N`` does all of that N times in turn on the same plane, each round reported as one
run is, then one line per comparison across the rounds: bind mode's pods/s as a share of its
round's 1-thread Binding rate, the no-decision placer's as a share of the same (what deciding
nothing at all reaches beside the same creators), and bind mode's as a share of the
no-decision placer's, each with how many rounds reached 80 %. The machine's own speed drifts
from one minute to the next (the API server's CPU for the same 1,500 creates and Bindings was
3.1 to 5.9 s in nine runs of one hour), so only rounds weigh one placer against the other.
``--placer-cpus 1`` runs the placers (the binder, the no-decision placer and kube-scheduler) on
CPU 1 and everything else (etcd, the API server, the controller manager, the creators, this
process's watch and raw Bindings) on the other CPUs: a placer on a node of its own, as a
binder's Deployment runs in a cluster, instead of taking its CPU from the API server and the
creators it is measured against.
``--profile DIR`` records where the binder holds the GIL (py-spy, which must be installed) into
DIR, as collapsed stacks.
"""

import argparse
import contextlib
import json
import os
import queue
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient, Configuration, CoreV1Api

from models.kube_objects import BATCH_ANNOTATION, SHARD_SIZE_ANNOTATION, build_snapshot
from models.plan import Violation
from models.policy import Policy
from placer.binder.loop import PLACEMENT_GATE
from placer.kube.adapter import KubernetesAdapter, WatchExpired
from solver.check import audit, keep_plan, worst_domain_loss
from solver.stock import stock_rules as solver_stock_rules
from tests.e2e.control_plane import (
    ControlPlane,
    create_namespace,
    create_node,
    find_assets,
    json_of,
    stop_child,
)

POLICY = Policy()
CLUSTER = "bench"
ZONES = ("a", "b", "c")
NODES_PER_RACK = 10
LEASE_NAMESPACE = "redis-placer"
RAW_THREADS = (1, 8, 32)
NOBODY = "bench-nobody"
"""The scheduler name of pods no real scheduler serves (the raw and trivial runs)."""


# -- objects ---------------------------------------------------------------------------------


def node_labels(index: int) -> dict[str, str]:
    zone = ZONES[index % len(ZONES)]
    rack = index // (len(ZONES) * NODES_PER_RACK)
    return {
        POLICY.topology.zone: f"zone-{zone}",
        POLICY.topology.rack: f"rack-{zone}{rack}",
        "bench": "node",
    }


def shard_labels(shard: int) -> dict[str, str]:
    return {**POLICY.selector, POLICY.labels.cluster: CLUSTER, POLICY.labels.shard: str(shard)}


def stock_rules(shard: int, master: bool) -> dict[str, Any]:
    """The strongest per-pod rules a user can give kube-scheduler for the binder's guarantees:
    the demo's stock rules with the master spread made strict (DoNotSchedule)."""
    return solver_stock_rules(POLICY, CLUSTER, str(shard), master, "DoNotSchedule")


def pod_body(mode: str, shard: int, index: int, members: int) -> dict[str, Any]:
    labels = shard_labels(shard)
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "redis",
                "image": "redis:7.2",
                "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}},
            }
        ],
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"bench": "node"},
    }
    if mode == "stock":
        labels[POLICY.labels.role] = "master" if index == 0 else "replica"
        spec.update(stock_rules(shard, index == 0))
    elif mode in ("bind", "backlog"):
        spec["schedulerName"] = POLICY.scheduler_name
    elif mode == "gate":
        spec["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    else:  # raw, trivial: pods no real scheduler serves
        spec["schedulerName"] = NOBODY
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{CLUSTER}-{shard}-{index}",
            "labels": labels,
            "annotations": {SHARD_SIZE_ANNOTATION: str(members)},
        },
        "spec": spec,
    }


def create_nodes(api: ApiClient, count: int, threads: int) -> None:
    work: queue.Queue[int] = queue.Queue()
    for i in range(count):
        work.put(i)

    def worker() -> None:
        while True:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            create_node(api, f"node-{i:05d}", node_labels(i), cpu="8", memory="32Gi", pods="110")

    _parallel(worker, threads)


def _parallel(worker: Callable[[], None], threads: int) -> None:
    errors: list[BaseException] = []

    def guarded() -> None:
        try:
            worker()
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=guarded, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]


def api_client(plane: ControlPlane, pool: int) -> ApiClient:
    configuration: Configuration = plane.configuration()
    configuration.connection_pool_maxsize = pool
    return ApiClient(configuration)


# -- watching --------------------------------------------------------------------------------


class PodTimes:
    """When each pod of a namespace was created (by us) and first seen with a node (watch)."""

    def __init__(self, adapter: KubernetesAdapter, namespace: str) -> None:
        self.adapter = adapter
        self.namespace = namespace
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.nodes: dict[str, str] = {}
        self.batches: dict[str, str] = {}
        """The binder's batch of each bound pod (its annotation), for the timeline."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        _, self._version = adapter.list_pods_with_version(namespace)

    def start(self) -> "PodTimes":
        self._thread.start()
        return self

    def note_created(self, name: str) -> None:
        with self._lock:
            self.created[name] = time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self.adapter.watch_pods(
                    self.namespace, resource_version=self._version, timeout_seconds=30
                ):
                    self._version = event.resource_version or self._version
                    node = (event.object.get("spec") or {}).get("nodeName")
                    name = event.object["metadata"].get("name")
                    if node and name and event.type != "DELETED":
                        with self._lock:
                            if name not in self.bound:
                                self.bound[name] = time.monotonic()
                                self.nodes[name] = node
                                notes = event.object["metadata"].get("annotations") or {}
                                if BATCH_ANNOTATION in notes:
                                    self.batches[name] = notes[BATCH_ANNOTATION]
                    if self._stop.is_set():
                        return
            except WatchExpired:
                _, self._version = self.adapter.list_pods_with_version(self.namespace)
            except Exception as exc:  # a dropped watch: resume from the last version
                print(f"  watch: {exc}; resuming", file=sys.stderr)
                time.sleep(0.5)

    def wait_bound(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.bound) >= count:
                    return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        self._stop.set()


# -- where the CPU goes ----------------------------------------------------------------------


_REQUEST_METRIC = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")
_METRIC_LABEL = re.compile(r'(\w+)="([^"]*)"')


def request_counts(api: ApiClient) -> Counter[str]:
    """The requests the API server has served, by verb and resource: its own
    ``apiserver_request_total``, so every client's requests count, the control plane's too."""
    request = api.param_serialize(
        method="GET",
        resource_path="/metrics",
        header_params={"Accept": "text/plain"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    response.read()
    if response.status != 200:
        raise RuntimeError(f"GET /metrics answered {response.status}")
    counts: Counter[str] = Counter()
    for line in (response.data or b"").decode().splitlines():
        found = _REQUEST_METRIC.match(line)
        if found is None:
            continue
        labels = dict(_METRIC_LABEL.findall(found.group(1)))
        resource = labels.get("resource", "") or labels.get("path", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[f"{labels.get('verb', '?')} {resource}"] += int(float(found.group(2)))
    return counts


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin(pid: int, cpus: frozenset[int] | None) -> None:
    """Every thread of process ``pid`` onto ``cpus`` (threads it starts later inherit it from
    theirs); None leaves it where it is."""
    if cpus is None:
        return
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), cpus)


QUIET_CORES = 0.25
"""A plane is quiet when it, and the placer about to run, use less than this many cores."""
QUIET_WAIT_SECONDS = 60.0


def wait_quiet(plane: ControlPlane, binder: "Binder | None") -> float:
    """Seconds until the plane and the placer use less than ``QUIET_CORES`` over a second
    (at most ``QUIET_WAIT_SECONDS``): what the last run left (its pods' deletion, its Events,
    etcd's compaction) and the placer's own start must not bill the run measured next."""

    def used() -> float:
        return sum(s for name, s in cpu_of(plane, binder).items() if name != "benchmark")

    started = time.monotonic()
    before = used()
    while time.monotonic() - started < QUIET_WAIT_SECONDS:
        time.sleep(1.0)
        now = used()
        if now - before < QUIET_CORES:
            break
        before = now
    return time.monotonic() - started


def cpu_of(plane: ControlPlane, binder: "Binder | None") -> dict[str, float]:
    pids = {p.name: p.popen.pid for p in plane.processes if p.popen is not None}
    if binder is not None:
        pids["binder"] = binder.process.pid
    pids["benchmark"] = os.getpid()
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


# -- the placers -----------------------------------------------------------------------------


@dataclass
class Binder:
    process: subprocess.Popen[bytes]
    log_path: Path
    profiler: subprocess.Popen[bytes] | None = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> float | None:
        """SIGTERM, and the process's CPU seconds over its whole life once it exited (from
        the rusage of the child reaped), or None if it had exited already."""
        if self.profiler is not None and self.profiler.poll() is None:
            self.profiler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                self.profiler.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.profiler.kill()
        if self.process.poll() is not None:
            return None
        before = _children_cpu()
        stop_child(self.process, timeout=30)
        return _children_cpu() - before


def _children_cpu() -> float:
    """User + system CPU seconds of this process's children reaped so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


_SHUTDOWN_WRITES = re.compile(r"background writes at shutdown: (.*)$", re.MULTILINE)
_LEADS = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ placer\.kube\.leader .* leads ", re.MULTILINE
)


def led_at(log: str) -> float | None:
    """When the binder's log first says it took the Lease, in seconds since the epoch (its
    lines carry the local time, to the millisecond); None if it never did."""
    found = _LEADS.search(log)
    if found is None:
        return None
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def start_binder(
    plane: ControlPlane,
    mode: str,
    extra: list[str],
    workdir: Path,
    profile: Path | None,
    name: str | None = None,
    cpus: frozenset[int] | None = None,
) -> Binder:
    """``redis-placer binder --enforce mode``, once it leads and has listed the cluster;
    ``name`` (default: the mode) names its log, its profile and its identity; ``cpus`` (the
    ``--placer-cpus``) the cores it runs on."""
    name = name or mode
    log_path = workdir / f"binder-{name}.log"
    args = [
        sys.executable,
        "-m",
        "placer.cli",
        "binder",
        "--enforce",
        mode,
        "--kubeconfig",
        str(plane.kubeconfig),
        "--lease-namespace",
        LEASE_NAMESPACE,
        "--metrics-port",
        "0",
        *extra,
    ]
    env = {**os.environ, "POD_NAME": f"bench-binder-{name}", "NO_PROXY": "127.0.0.1,localhost"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=Path(__file__).parents[1]
        )
    pin(process.pid, cpus)
    binder = Binder(process, log_path)
    deadline = time.monotonic() + 60
    while "deciding as the leader" not in binder.log():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"binder did not start:\n{binder.log()[-3000:]}")
        time.sleep(0.1)
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        spy = shutil.which("py-spy")
        if spy is None:
            raise RuntimeError("--profile needs py-spy on the PATH (pip install py-spy)")
        binder.profiler = subprocess.Popen(
            [spy, "record", "--pid", str(process.pid), "--format", "raw", "--gil",
             "--rate", "100", "--output", str(profile / f"binder-{name}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1.0)
    return binder


def start_trivial(
    plane: ControlPlane, namespace: str, workdir: Path, cpus: frozenset[int] | None = None
) -> Binder:
    """``benchmarks.trivial_binder`` on the run's namespace: bound as seen, no decision."""
    log_path = workdir / "binder-trivial.log"
    args = [
        sys.executable, "-m", "benchmarks.trivial_binder", "--kubeconfig", str(plane.kubeconfig),
        "--namespace", namespace, "--scheduler-name", NOBODY, "--threads", "32",
    ]  # fmt: skip
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=Path(__file__).parents[1]
        )
    pin(process.pid, cpus)
    binder = Binder(process, log_path)
    deadline = time.monotonic() + 60
    while "ready" not in binder.log():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"trivial binder did not start:\n{binder.log()[-3000:]}")
        time.sleep(0.1)
    return binder


# -- one run ---------------------------------------------------------------------------------


@dataclass
class RunResult:
    mode: str
    nodes: int
    pods: int
    bound: int
    created_seconds: float
    """From the first create to the last create returning."""
    seconds: float
    pods_per_second: float
    first_bind: float
    shard_p50: float
    shard_p90: float
    shard_p99: float
    hard: int
    soft: int
    soft_rules: dict[str, int]
    zone_master_loss: float
    rack_master_loss: float
    load_start: float
    load_end: float
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds each process used from the first create to the last bind."""
    timeline: list[str] = field(default_factory=list)
    """Per binder batch: when its shards were complete, and its first and last bind."""
    requests: dict[str, int] = field(default_factory=dict)
    """Requests the API server served in that time, by verb and resource (its /metrics)."""
    solves: list[str] = field(default_factory=list)
    placer_cpu_to_exit: float | None = None
    """The placer's CPU seconds from the first create until it exited, stopped after the last
    bind: what it spent on this run's pods with the writes its rate limit deferred (Events,
    role labels), which it sends when stopped. None when it had exited before."""
    shutdown_writes: str = ""
    """The binder's own word on the writes it sent when stopped, and those it left."""
    violations: list[str] = field(default_factory=list)
    """Each violation the checker found, with the binder batch that placed each of its pods
    (``violation_lines``): where a run's hard and soft counts come from."""


def create_pods(
    core: CoreV1Api,
    namespace: str,
    mode: str,
    shards: int,
    members: int,
    threads: int,
    times: PodTimes,
) -> float:
    """Create every shard's pods (master first) with ``threads`` threads; when it started."""
    work: queue.Queue[int] = queue.Queue()
    for s in range(shards):
        work.put(s)

    def worker() -> None:
        while True:
            try:
                shard = work.get_nowait()
            except queue.Empty:
                return
            for index in range(members):
                body = pod_body(mode, shard, index, members)
                resp = core.create_namespaced_pod(namespace, body, _preload_content=False)  # type: ignore[arg-type]
                json_of(resp)  # read, so the connection serves the next create
                times.note_created(body["metadata"]["name"])

    started = time.monotonic()
    _parallel(worker, threads)
    return started


@dataclass(frozen=True)
class Judged:
    """The independent checker's verdict on a run's placement, as the cluster holds it."""

    hard: int
    soft: int
    soft_rules: dict[str, int]
    zone_master_loss: float
    rack_master_loss: float
    violations: list[Violation]


def judge(adapter: KubernetesAdapter, namespace: str) -> Judged:
    """Hard and soft violations of the placement, and the worst single-zone and single-rack
    master loss."""
    nodes = adapter.list_nodes(label_selector="bench=node")
    pods = adapter.list_pods(namespace)
    snapshot = build_snapshot([*nodes, *pods], POLICY)
    violations = audit(snapshot, POLICY)
    hard = sum(1 for v in violations if v.severity == "hard")
    soft_rules = Counter(v.rule for v in violations if v.severity == "soft")
    losses = worst_domain_loss(snapshot, POLICY, keep_plan(snapshot))
    zone = next((d.master_loss_ratio for d in losses if d.level == "zone"), 0.0)
    rack = next((d.master_loss_ratio for d in losses if d.level == "rack"), 0.0)
    return Judged(hard, sum(soft_rules.values()), dict(soft_rules), zone, rack, violations)


def violation_lines(violations: list[Violation], batches: dict[str, str]) -> list[str]:
    """One line per violation: severity, rule, the checker's message, and the binder batch
    whose write placed each of its pods (``batches``: pod name to its batch annotation; a pod
    no binder batch placed says so), so a run that leaves one says which decision made it."""
    lines = []
    for v in violations:
        names = [pod.partition("/")[2] or pod for pod in v.pods]
        placed = ", ".join(f"{name} in {batches.get(name, 'no binder batch')}" for name in names)
        lines.append(f"{v.severity} {v.rule}: {v.message}" + (f" ({placed})" if placed else ""))
    return lines


def delete_pods(core: CoreV1Api, namespace: str) -> None:
    json_of(
        core.delete_collection_namespaced_pod(
            namespace, grace_period_seconds=0, _preload_content=False
        )
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        items = json_of(core.list_namespaced_pod(namespace, limit=1, _preload_content=False))
        if not items["items"]:
            return
        time.sleep(0.5)
    raise RuntimeError(f"pods of {namespace} not deleted after 300 s")


def run_placer(
    plane: ControlPlane,
    api: ApiClient,
    mode: str,
    args: argparse.Namespace,
    workdir: Path,
) -> RunResult:
    core = CoreV1Api(api)
    adapter = KubernetesAdapter(api, instance="bench")
    namespace = f"bench-{mode}-{int(time.time())}"
    create_namespace(api, namespace)
    binder = None
    backlog = mode == "backlog"  # the binder starts once every pod exists
    cpus = args.placer_cpus
    if mode in ("bind", "gate"):
        binder = start_binder(plane, mode, args.binder_arg, workdir, args.profile, cpus=cpus)
    elif mode == "trivial":
        binder = start_trivial(plane, namespace, workdir, cpus)
    total = args.shards * args.members
    times = PodTimes(adapter, namespace).start()
    settled = wait_quiet(plane, binder)
    load_start = os.getloadavg()[0]
    print(
        f"{mode}: creating {total} pods (load {load_start:.2f}, quiet after {settled:.1f} s)",
        flush=True,
    )
    requests_before = request_counts(api)
    cpu_before = cpu_of(plane, binder)
    try:
        started = create_pods(
            core, namespace, mode, args.shards, args.members, args.creators, times
        )
        created_s = time.monotonic() - started
        if backlog:
            monotonic_at_epoch = time.time() - time.monotonic()
            binder = start_binder(plane, "bind", args.binder_arg, workdir, args.profile, mode, cpus)
            led = led_at(binder.log())
            if led is None:
                raise RuntimeError(
                    f"backlog: the binder's log never says it leads:\n{binder.log()[-3000:]}"
                )
            started = led - monotonic_at_epoch  # its pods/s count from when it could act
        done = times.wait_bound(total, args.timeout)
        load_end = os.getloadavg()[0]
        cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_of(plane, binder).items()}
        requests = request_counts(api) - requests_before
    finally:
        times.stop()
        lifetime = binder.stop() if binder is not None else None
    log = binder.log() if binder is not None else ""
    to_exit = lifetime - cpu_before.get("binder", 0.0) if lifetime is not None else None
    shutdown = _SHUTDOWN_WRITES.search(log)
    solves = [line.split(" solve ", 1)[1] for line in log.splitlines() if " solve batch=" in line]
    bound_at = dict(times.bound)
    last = max(bound_at.values()) if bound_at else started
    by_shard: dict[str, list[str]] = defaultdict(list)
    for name in times.created:
        by_shard[name.rsplit("-", 1)[0]].append(name)
    latencies = [  # from when the shard was whole and its placer could act
        min(bound_at[n] for n in names if n in bound_at)
        - max(started, *(times.created[n] for n in names))
        for names in by_shard.values()
        if any(n in bound_at for n in names)
    ]
    timeline = batch_timeline(times, by_shard, started)
    judged = judge(adapter, namespace)
    seconds = last - started
    result = RunResult(
        mode=mode,
        nodes=args.nodes,
        pods=total,
        bound=len(bound_at),
        created_seconds=created_s,
        seconds=seconds,
        pods_per_second=len(bound_at) / seconds if seconds > 0 else 0.0,
        first_bind=(min(bound_at.values()) - started) if bound_at else float("nan"),
        shard_p50=statistics.median(latencies) if latencies else float("nan"),
        shard_p90=_quantile(latencies, 0.9),
        shard_p99=_quantile(latencies, 0.99),
        hard=judged.hard,
        soft=judged.soft,
        soft_rules=judged.soft_rules,
        zone_master_loss=judged.zone_master_loss,
        rack_master_loss=judged.rack_master_loss,
        load_start=load_start,
        load_end=load_end,
        cpu=cpu,
        requests=dict(requests),
        timeline=timeline,
        solves=solves,
        placer_cpu_to_exit=to_exit,
        shutdown_writes=shutdown.group(1).strip() if shutdown else "",
        violations=violation_lines(judged.violations, dict(times.batches)),
    )
    print(
        f"{mode}: {len(bound_at)}/{total} bound in {seconds:.1f} s "
        f"({'from the Lease taken, after ' if backlog else ''}{created_s:.1f} s creating)"
        f"{'' if done else ' (timed out)'}; {len(solves)} solves",
        flush=True,
    )
    delete_pods(core, namespace)
    return result


def batch_timeline(times: PodTimes, by_shard: dict[str, list[str]], started: float) -> list[str]:
    """Per batch, in seconds from the first create: when its first and its last shard were
    complete (their last member created), its first bind and its last bind. The gap from
    the last complete shard to the first bind is the batch's read and solve; the one from
    first to last bind its writing."""
    shards_of: dict[str, set[str]] = defaultdict(set)
    for name, batch in times.batches.items():
        shards_of[batch].add(name.rsplit("-", 1)[0])
    lines = []
    for batch, shards in sorted(shards_of.items(), key=lambda kv: int(kv[0].rsplit("-", 1)[1])):
        complete = [max(times.created[n] for n in by_shard[s]) - started for s in shards]
        binds = [times.bound[n] - started for n, b in times.batches.items() if b == batch]
        lines.append(
            f"batch {batch}: {len(shards)} shards complete {min(complete):.2f}-{max(complete):.2f} s,"
            f" bound {min(binds):.2f}-{max(binds):.2f} s"
        )
    return lines


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the API server's own Binding rate -------------------------------------------------------


@dataclass
class RawRates:
    """The API server alone, driven by the kubernetes client from this process."""

    binds: dict[int, float] = field(default_factory=dict)
    """Bindings/s of pre-created pods, by threads."""
    creates: float = 0.0
    """Pods created/s by ``--creators`` threads, nothing else running."""


def raw_rates(api: ApiClient, args: argparse.Namespace) -> RawRates:
    core = CoreV1Api(api)
    adapter = KubernetesAdapter(api, instance="bench")
    nodes = [n["metadata"]["name"] for n in adapter.list_nodes(label_selector="bench=node")]
    rates = RawRates()
    for threads in RAW_THREADS:
        namespace = f"bench-raw-{threads}-{int(time.time())}"
        create_namespace(api, namespace)
        started = time.monotonic()
        pods = _create_unscheduled(core, namespace, args)
        created = len(pods) / (time.monotonic() - started)
        rates.creates = max(rates.creates, created)
        time.sleep(2.0)  # let the watches settle: measure the binds alone
        load = os.getloadavg()[0]
        seconds = _bind_all(adapter, namespace, pods, nodes, threads)
        rates.binds[threads] = len(pods) / seconds
        print(
            f"raw: {len(pods)} created at {created:.0f}/s; Bindings with {threads} threads in "
            f"{seconds:.2f} s: {rates.binds[threads]:.0f}/s (load {load:.2f})",
            flush=True,
        )
        delete_pods(core, namespace)
    return rates


def _create_unscheduled(
    core: CoreV1Api, namespace: str, args: argparse.Namespace
) -> list[tuple[str, str]]:
    """``--raw-pods`` pods that no scheduler serves: (name, uid)."""
    work: queue.Queue[int] = queue.Queue()
    for s in range(-(-args.raw_pods // args.members)):
        work.put(s)
    created: list[tuple[str, str]] = []
    lock = threading.Lock()

    def create() -> None:
        while True:
            try:
                shard = work.get_nowait()
            except queue.Empty:
                return
            for index in range(args.members):
                body = pod_body("raw", shard, index, args.members)
                resp = core.create_namespaced_pod(namespace, body, _preload_content=False)  # type: ignore[arg-type]
                pod = json_of(resp)
                with lock:
                    created.append((pod["metadata"]["name"], pod["metadata"]["uid"]))

    _parallel(create, args.creators)
    return created[: args.raw_pods]


def _bind_all(
    adapter: KubernetesAdapter,
    namespace: str,
    pods: list[tuple[str, str]],
    nodes: list[str],
    threads: int,
) -> float:
    """POST a Binding for every pod with ``threads`` threads; the seconds it took."""
    work: queue.Queue[tuple[int, str, str]] = queue.Queue()
    for i, (name, uid) in enumerate(pods):
        work.put((i, name, uid))

    def bind() -> None:
        while True:
            try:
                i, name, uid = work.get_nowait()
            except queue.Empty:
                return
            result = adapter.bind_pod(namespace, name, uid, nodes[i % len(nodes)])
            if not result.ok:
                raise RuntimeError(f"raw bind of {name}: {result.message}")

    started = time.monotonic()
    _parallel(bind, threads)
    return time.monotonic() - started


# -- the report ------------------------------------------------------------------------------

LABELS = {
    "stock": "kube-scheduler",
    "bind": "binder, bind mode",
    "gate": "binder + kube-scheduler, gate mode",
    "trivial": "no decision: bound as seen, 32 threads",
    "backlog": "binder, bind mode, pods already pending",
}
CREATORS_NOTE = "the --creators threads (nothing else running)"


def against_targets(results: list[RunResult], rates: RawRates | None = None) -> list[str]:
    """The comparisons the runs make, when both sides ran: gate mode's pods/s and shard p50
    against the stock scheduler's, bind mode's pods/s against the stock scheduler's and as a
    share of the API server's own Binding rate at each thread count (``rates``, the raw run),
    and the binder's CPU beyond the no-decision placer's, a pod (to the last bind, and to the
    placers' exit, with the writes deferred past it)."""
    by_mode = {r.mode: r for r in results}
    lines = []

    def shares(pods_per_second: float, binds: dict[int, float]) -> str:
        return ", ".join(
            f"{pods_per_second / rate:.0%} of {rate:.0f}/s with {threads} "
            f"thread{'s' if threads > 1 else ''}"
            for threads, rate in sorted(binds.items())
            if rate > 0
        )

    bind = by_mode.get("bind")
    if bind is not None and rates is not None and rates.binds:
        stock_pods = by_mode["stock"].pods_per_second if "stock" in by_mode else 0.0
        against_stock = (
            f" ({bind.pods_per_second / stock_pods:.1f}x stock's {stock_pods:.1f})"
            if stock_pods > 0
            else ""
        )
        lines.append(
            f"bind against the API server's own Bindings: {bind.pods_per_second:.1f} pods/s"
            f"{against_stock} = {shares(bind.pods_per_second, rates.binds)}"
        )
    backlog = by_mode.get("backlog")
    if backlog is not None and rates is not None and rates.binds:
        lines.append(
            f"bind on pods already pending, from the Lease taken, against the API server's own "
            f"Bindings: {backlog.pods_per_second:.1f} pods/s = "
            f"{shares(backlog.pods_per_second, rates.binds)}"
        )
    trivial = by_mode.get("trivial")
    one_thread = rates.binds.get(1, 0.0) if rates is not None else 0.0
    if trivial is not None and one_thread > 0:
        lines.append(
            f"no-decision placer against the API server's own Bindings: "
            f"{trivial.pods_per_second:.1f} pods/s = "
            f"{trivial.pods_per_second / one_thread:.0%} of {one_thread:.0f}/s with 1 thread"
        )
    gate, stock = by_mode.get("gate"), by_mode.get("stock")
    if gate is not None and stock is not None and stock.pods_per_second > 0:
        lines.append(
            f"gate against stock: pods/s {gate.pods_per_second:.1f} against "
            f"{stock.pods_per_second:.1f} ({gate.pods_per_second / stock.pods_per_second:.3f}x); "
            f"shard p50 {gate.shard_p50:.2f} s against {stock.shard_p50:.2f} s"
        )
    if bind is not None and trivial is not None and trivial.pods_per_second > 0:
        lines.append(
            f"bind against the no-decision placer: {bind.pods_per_second:.1f} pods/s = "
            f"{bind.pods_per_second / trivial.pods_per_second:.0%} of "
            f"{trivial.pods_per_second:.1f}"
        )
    if bind is not None and trivial is not None and bind.pods > 0:

        def per_pod(binder: float | None, none: float | None) -> float | None:
            if binder is None or none is None:
                return None
            return (binder - none) / bind.pods * 1000

        window = per_pod(bind.cpu.get("binder"), trivial.cpu.get("binder"))
        to_exit = per_pod(bind.placer_cpu_to_exit, trivial.placer_cpu_to_exit)
        if window is not None:
            line = f"binder CPU beyond the no-decision placer's: {window:.2f} ms a pod to the last bind"
            if to_exit is not None:
                line += f", {to_exit:.2f} ms a pod to the placers' exit"
            lines.append(line)
    return lines


TARGET_SHARE = 0.8
"""Issue 49's target: bind mode at 80 % of the API server's own (1-thread) Binding rate."""

Round = tuple[list[RunResult], RawRates | None]


def across_rounds(rounds: list[Round]) -> list[str]:
    """Per comparison, its share in every round that measured both sides and how many of
    those reached ``TARGET_SHARE``: bind mode and the no-decision placer against the round's
    1-thread Binding rate, and bind mode against the no-decision placer."""

    def pods_per_second(results: list[RunResult], mode: str) -> float | None:
        found = [r.pods_per_second for r in results if r.mode == mode]
        return found[0] if found else None

    def line(label: str, shares: list[float]) -> str:
        met = sum(1 for share in shares if share >= TARGET_SHARE)
        listed = ", ".join(f"{share:.0%}" for share in shares)
        return f"{label}: {listed} ({TARGET_SHARE:.0%} or more in {met} of {len(shares)})"

    bind_share: list[float] = []
    trivial_share: list[float] = []
    backlog_share: list[float] = []
    bind_of_trivial: list[float] = []
    for results, rates in rounds:
        one_thread = rates.binds.get(1, 0.0) if rates is not None else 0.0
        bind = pods_per_second(results, "bind")
        trivial = pods_per_second(results, "trivial")
        backlog = pods_per_second(results, "backlog")
        if one_thread > 0 and bind is not None:
            bind_share.append(bind / one_thread)
        if one_thread > 0 and trivial is not None:
            trivial_share.append(trivial / one_thread)
        if one_thread > 0 and backlog is not None:
            backlog_share.append(backlog / one_thread)
        if bind is not None and trivial:
            bind_of_trivial.append(bind / trivial)
    lines = []
    if bind_share:
        lines.append(line("bind mode, share of the round's 1-thread Binding rate", bind_share))
    if trivial_share:
        lines.append(
            line("no-decision placer, share of the round's 1-thread Binding rate", trivial_share)
        )
    if bind_of_trivial:
        lines.append(line("bind mode, share of the round's no-decision placer", bind_of_trivial))
    if backlog_share:
        lines.append(
            line(
                "bind mode on pods already pending, share of the round's 1-thread Binding rate",
                backlog_share,
            )
        )
    return lines


def table(results: list[RunResult], rates: RawRates | None) -> Iterator[str]:
    headers = [
        "placer",
        "nodes",
        "pods",
        "bound",
        "created in s",
        "last bind at s",
        "pods/s",
        "first bind s",
        "shard p50 s",
        "shard p90 s",
        "shard p99 s",
        "hard",
        "soft",
        "worst zone master loss",
        "worst rack master loss",
        "load start/end",
    ]
    yield " | ".join(headers)
    yield " | ".join("---" for _ in headers)
    for r in results:
        soft = f"{r.soft}" + (
            f" ({', '.join(f'{k} {v}' for k, v in sorted(r.soft_rules.items()))})" if r.soft else ""
        )
        yield " | ".join(
            [
                LABELS[r.mode],
                f"{r.nodes:,}",
                f"{r.pods:,}",
                f"{r.bound:,}",
                f"{r.created_seconds:.1f}",
                f"{r.seconds:.1f}",
                f"{r.pods_per_second:.1f}",
                f"{r.first_bind:.2f}",
                f"{r.shard_p50:.2f}",
                f"{r.shard_p90:.2f}",
                f"{r.shard_p99:.2f}",
                *(
                    ("-", "-", "-", "-")  # it decides nothing: no roles, no rules to judge
                    if r.mode == "trivial"
                    else (
                        str(r.hard),
                        soft,
                        f"{r.zone_master_loss:.1%}",
                        f"{r.rack_master_loss:.1%}",
                    )
                ),
                f"{r.load_start:.1f} / {r.load_end:.1f}",
            ]
        )
    if rates is not None:
        yield ""
        yield (
            "API server alone: Bindings of pre-created pods "
            + ", ".join(
                f"{rate:.0f}/s with {threads} thread{'s' if threads > 1 else ''}"
                for threads, rate in sorted(rates.binds.items())
            )
            + f"; pods created {rates.creates:.0f}/s by {CREATORS_NOTE}"
        )


@contextmanager
def plane_with_nodes(
    assets: Path, folder: Path, args: argparse.Namespace
) -> Iterator[tuple[ControlPlane, ApiClient]]:
    """A control plane started in ``folder``, its ``--nodes`` Ready nodes created."""
    plane = ControlPlane(assets, folder, with_scheduler=True)
    print(f"control plane in {folder} (load {os.getloadavg()[0]:.2f})", flush=True)
    plane.start()
    try:
        for process in plane.processes:
            if process.name == "kube-scheduler" and process.popen is not None:
                pin(process.popen.pid, args.placer_cpus)  # the stock run's placer
        api = api_client(plane, pool=64)
        create_namespace(api, LEASE_NAMESPACE)
        started = time.monotonic()
        create_nodes(api, args.nodes, args.creators)
        print(f"{args.nodes} nodes in {time.monotonic() - started:.1f} s", flush=True)
        yield plane, api
    finally:
        plane.stop()


def placer_cpus(parser: argparse.ArgumentParser, given: str | None) -> frozenset[int] | None:
    """``--placer-cpus``, checked; this process (and so the control plane and the creators it
    starts) moves to the other CPUs it may use."""
    if given is None:
        return None
    usable = os.sched_getaffinity(0)
    try:
        cpus = frozenset(int(c) for c in given.split(",") if c.strip())
    except ValueError:
        parser.error(f"--placer-cpus: {given!r} is not a list of CPU numbers")
    if not cpus or not cpus < usable:
        parser.error(
            f"--placer-cpus: {given!r} must name some, not all, of the CPUs this process may "
            f"use ({', '.join(map(str, sorted(usable)))})"
        )
    os.sched_setaffinity(0, usable - cpus)
    return cpus


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=500)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--creators", type=int, default=16, help="threads creating pods")
    parser.add_argument("--runs", default="stock,bind,gate,trivial,raw")
    parser.add_argument("--raw-pods", type=int, default=600)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument(
        "--binder-arg",
        action="append",
        default=[],
        help="passed to redis-placer binder (repeat), e.g. --binder-arg=--solver=greedy",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy output folder")
    parser.add_argument(
        "--plane-per-run",
        action="store_true",
        help="each mode on a control plane of its own, started afresh with the same nodes",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat --runs this many times, in turn"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--placer-cpus",
        default=None,
        help="run the placers (binder, no-decision placer, kube-scheduler) on these CPUs, e.g. "
        "1, and the control plane and the benchmark on the others: a placer on a node of its "
        "own, as in a cluster, not beside the API server",
    )
    args = parser.parse_args()
    args.placer_cpus = placer_cpus(parser, args.placer_cpus)
    assets = find_assets()
    if assets is None:
        parser.error("set KUBEBUILDER_ASSETS to a folder with etcd, kube-apiserver, kube-scheduler")
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = set(runs) - {*LABELS, "raw"}
    if unknown:
        parser.error(f"--runs: unknown {', '.join(sorted(unknown))}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="real-api-"))
    workdir.mkdir(parents=True, exist_ok=True)
    placers = [m for m in runs if m != "raw"]
    rounds: list[Round] = []
    if args.plane_per_run:
        for number in range(args.rounds):
            results: list[RunResult] = []
            rates: RawRates | None = None
            for mode in placers:
                folder = workdir / f"plane-{mode}-{number + 1}"
                with plane_with_nodes(assets, folder, args) as (plane, api):
                    results.append(run_placer(plane, api, mode, args, workdir))
            if "raw" in runs:
                folder = workdir / f"plane-raw-{number + 1}"
                with plane_with_nodes(assets, folder, args) as (_, api):
                    rates = raw_rates(api, args)
            rounds.append((results, rates))
    else:
        with plane_with_nodes(assets, workdir / "plane", args) as (plane, api):
            for _ in range(args.rounds):
                results = [run_placer(plane, api, m, args, workdir) for m in placers]
                rounds.append((results, raw_rates(api, args) if "raw" in runs else None))
    report = [f"python -m benchmarks.real_api {' '.join(sys.argv[1:])}"]
    for number, (results, rates) in enumerate(rounds, start=1):
        if len(rounds) > 1:
            report.append(f"\n## round {number} of {len(rounds)}\n")
        report.extend(round_report(results, rates))
    if len(rounds) > 1:
        report.append("\n## across the rounds\n")
        report.extend(across_rounds(rounds))
    text = "\n".join(report)
    print("\n" + text)
    (workdir / "report.md").write_text(text + "\n")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "rounds": [
                        {
                            "runs": [asdict(r) for r in results],
                            "raw": asdict(rates) if rates else None,
                        }
                        for results, rates in rounds
                    ]
                },
                indent=2,
            )
        )


def round_report(results: list[RunResult], rates: RawRates | None) -> list[str]:
    """One round's table, CPU, comparisons, violations, requests, batches and solves."""
    report = [*table(results, rates), ""]
    for r in results:
        used = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.cpu.items(), key=lambda kv: -kv[1]))
        report.append(f"{r.mode}: CPU seconds from first create to last bind: {used}")
    for r in results:
        if r.placer_cpu_to_exit is not None:
            writes = f" (at shutdown: {r.shutdown_writes})" if r.shutdown_writes else ""
            report.append(
                f"{r.mode}: placer CPU seconds from first create to its exit, with the writes "
                f"it deferred: {r.placer_cpu_to_exit:.1f}{writes}"
            )
    report.extend(against_targets(results, rates))
    for r in results:
        if r.violations:
            report.append(f"\n{r.mode} violations:")
            report.extend(f"  {line}" for line in r.violations)
    for r in results:
        served = ", ".join(f"{k} {n}" for k, n in Counter(r.requests).most_common(10))
        report.append(f"{r.mode}: API requests from first create to last bind: {served}")
    for r in results:
        if r.timeline:
            report.append(f"\n{r.mode} batches:")
            report.extend(f"  {line}" for line in r.timeline)
    for r in results:
        if r.solves:
            report.append(f"\n{r.mode} solves:")
            report.extend(f"  {line}" for line in r.solves)
    return report


if __name__ == "__main__":
    main()
