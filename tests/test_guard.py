"""The maintenance guard against a real Redis Cluster (3 masters, 3 replicas on loopback) behind
an in-memory API server: an eviction of a master is refused until its role is handed over,
a cordoned node's masters are handed over by the leader, nothing waits forever, and the webhook
answers AdmissionReviews over real TLS."""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models.policy import Policy
from placer.kube.fake import FakeKubeAdapter
from placer.maintenance.guard import HANDOVER_ANNOTATION, STOP_ASKED_ANNOTATION, Admission, Guard
from placer.maintenance.webhook import WebhookServer, review
from placer.metrics import Metrics
from tests.kube_dicts import node, redis_pod
from tests.tls_material import make_authority, write_leaf

if TYPE_CHECKING:
    from tests.redis_harness import RedisClusterHarness

pytest_plugins = ["tests.redis_harness"]

ZONES = ("a", "b", "c")


def _cluster(h: RedisClusterHarness) -> tuple[FakeKubeAdapter, dict[str, str]]:
    """Each master in its own zone, its replica in the next zone: pods ``s<shard>-m`` and
    ``s<shard>-r``. Returns the adapter and pod name -> server IP."""
    layout = h.layout()
    nodes = [node(f"{z}{i}", f"zone-{z}", f"zone-{z}-r{i}", pods=10) for z in ZONES for i in (0, 1)]
    pods = []
    ip_of: dict[str, str] = {}
    for shard, (master, replica) in enumerate(sorted(layout.items())):
        for suffix, ip, role, where in (
            ("m", master, "master", f"{ZONES[shard]}0"),
            ("r", replica, "replica", f"{ZONES[(shard + 1) % 3]}1"),
        ):
            name = f"s{shard}-{suffix}"
            obj = redis_pod(name, "cache", shard, role, node=where)
            obj["metadata"]["uid"] = f"uid-{name}"
            obj["status"]["podIP"] = ip
            obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
            pods.append(obj)
            ip_of[name] = ip
    return FakeKubeAdapter(nodes=nodes, pods=pods), ip_of


def _role(h: RedisClusterHarness, ip: str) -> str:
    return str(h.info_replication(ip)["role"])


def _guard(h: RedisClusterHarness, adapter: FakeKubeAdapter, **kw: Any) -> Guard:
    return Guard(adapter, Policy(), port=h.port, metrics=Metrics(), restore=False, **kw)


def test_an_eviction_of_a_master_waits_for_the_handover(
    redis_cluster: RedisClusterHarness,
) -> None:
    h = redis_cluster
    adapter, ip = _cluster(h)
    guard = _guard(h, adapter)
    first = guard.admit("default", "s0-m")
    assert not first.allowed and first.code == 429
    assert "hand over to default/s0-r" in first.message
    pod = adapter.pods[("default", "s0-m")]
    assert HANDOVER_ANNOTATION in pod["metadata"].get("annotations", {})
    done = guard.step(leading=True)
    assert "handed default/s0-m -> default/s0-r" in done
    assert _role(h, ip["s0-r"]) == "master" and _role(h, ip["s0-m"]) == "slave"
    labels = {n: adapter.pods[("default", n)]["metadata"]["labels"]["redis-role"] for n in ip}
    assert labels["s0-r"] == "master" and labels["s0-m"] == "replica"
    assert HANDOVER_ANNOTATION not in adapter.pods[("default", "s0-m")]["metadata"].get(
        "annotations", {}
    )
    h.wait_healthy()
    assert guard.admit("default", "s0-m").allowed  # a replica now; its new master serves
    reasons = [e["reason"] for e in adapter.events]
    assert "HandedOver" in reasons and "TookOver" in reasons


def test_a_standby_asks_and_acts_on_nothing(redis_cluster: RedisClusterHarness) -> None:
    h = redis_cluster
    adapter, ip = _cluster(h)
    guard = _guard(h, adapter)
    assert not guard.admit("default", "s1-m").allowed
    assert guard.step(leading=False) == []
    assert _role(h, ip["s1-m"]) == "master"
    # the leader (another replica: a fresh guard) finds the request on the pod
    leader = _guard(h, adapter)
    assert "handed default/s1-m -> default/s1-r" in leader.step(leading=True)


def test_a_replica_goes_while_its_master_serves(redis_cluster: RedisClusterHarness) -> None:
    adapter, _ = _cluster(redis_cluster)
    answer = _guard(redis_cluster, adapter).admit("default", "s2-r")
    assert answer.allowed


def test_no_replica_in_sync_holds_the_master_and_lets_the_replica_go(
    redis_cluster: RedisClusterHarness,
) -> None:
    h = redis_cluster
    adapter, ip = _cluster(h)
    h.cut_replication_link(ip["s1-r"])
    guard = _guard(h, adapter)
    held = guard.admit("default", "s1-m")
    assert not held.allowed and "default/s1-r is not in sync with its master" in held.message
    assert guard.admit("default", "s1-r").allowed  # its master serves
    assert not any(line.startswith("handed") for line in guard.step(leading=True))
    assert _role(h, ip["s1-m"]) == "master"  # nothing was handed to a replica behind


def test_a_hold_ends_after_its_bound(redis_cluster: RedisClusterHarness) -> None:
    h = redis_cluster
    adapter, ip = _cluster(h)
    h.cut_replication_link(ip["s0-r"])
    now = [1000.0]
    guard = _guard(h, adapter, max_hold_s=30.0, clock=lambda: now[0])
    assert not guard.admit("default", "s0-m").allowed
    now[0] += 31.0
    released = guard.admit("default", "s0-m")
    assert released.allowed
    assert released.warnings and "let through although" in released.warnings[0]
    assert any(e["reason"] == "HoldReleased" for e in adapter.events)
    value = guard.metrics.guard_admissions.labels(decision="released")._value.get()
    assert value == 1


def test_the_leader_hands_over_the_masters_of_a_cordoned_node(
    redis_cluster: RedisClusterHarness,
) -> None:
    h = redis_cluster
    adapter, ip = _cluster(h)
    adapter.cordon_node("b0")  # holds s1-m
    guard = _guard(h, adapter)
    done = guard.step(leading=True)
    assert "handed default/s1-m -> default/s1-r" in done
    assert _role(h, ip["s1-r"]) == "master"
    h.wait_healthy()
    assert all(not line.startswith("handed") for line in guard.step(leading=True))


def test_the_spread_is_restored_once_the_node_is_back(redis_cluster: RedisClusterHarness) -> None:
    h = redis_cluster
    adapter, ip = _cluster(h)
    policy = Policy.model_validate({"rules": {"survive": "zone"}})
    adapter.cordon_node("a0")  # s0's master; its replica is in zone b, beside s1's master
    guard = Guard(adapter, policy, port=h.port, restore=True)
    assert "handed default/s0-m -> default/s0-r" in guard.step(leading=True)
    h.wait_healthy()
    adapter.nodes["a0"]["spec"]["unschedulable"] = False
    guard._last_restore = -1e9
    done = guard.step(leading=True)
    assert "handed default/s0-r -> default/s0-m" in done, done
    assert _role(h, ip["s0-m"]) == "master"


# -- the webhook -------------------------------------------------------------------------------


def _request(kind: str, name: str = "s0-m", **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "u-1", "namespace": "default", "name": name, **extra}
    if kind == "evict":
        request |= {
            "resource": {"resource": "pods"},
            "subResource": "eviction",
            "operation": "CREATE",
        }
    elif kind == "delete":
        request |= {"resource": {"resource": "pods"}, "operation": "DELETE"}
    else:
        request |= {"resource": {"resource": "pods"}, "operation": "UPDATE"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_review_asks_the_guard_about_evictions_and_deletes_only() -> None:
    asked: list[tuple[str, str, bool]] = []

    def admit(namespace: str, name: str, *, dry_run: bool = False) -> Admission:
        asked.append((namespace, name, dry_run))
        return Admission(False, "hold on", 429)

    refused = review(_request("evict"), admit)["response"]
    assert refused == {
        "uid": "u-1",
        "allowed": False,
        "status": {"code": 429, "reason": "TooManyRequests", "message": "hold on"},
    }
    assert not review(_request("delete", dryRun=True), admit)["response"]["allowed"]
    assert review(_request("update"), admit)["response"]["allowed"]
    assert asked == [("default", "s0-m", False), ("default", "s0-m", True)]


def test_review_never_holds_the_last_delete_of_a_pod_already_going() -> None:
    """The kubelet deletes a terminating pod's object (grace 0) once its containers stop: the
    guard is not asked, however stale its reading."""
    asked: list[str] = []

    def admit(namespace: str, name: str, *, dry_run: bool = False) -> Admission:
        asked.append(name)
        return Admission(False, "hold on", 429)

    going = {"metadata": {"name": "s0-m", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert review(_request("delete", oldObject=going), admit)["response"]["allowed"]
    assert asked == []
    running = {"metadata": {"name": "s0-m"}}
    assert not review(_request("delete", oldObject=running), admit)["response"]["allowed"]
    assert asked == ["s0-m"]


def test_review_lets_through_when_the_guard_fails() -> None:
    def admit(namespace: str, name: str, *, dry_run: bool = False) -> Admission:
        raise RuntimeError("boom")

    answer = review(_request("evict"), admit)["response"]
    assert answer["allowed"] and "boom" in answer["warnings"][0]


def test_the_webhook_answers_over_tls(tmp_path: Path) -> None:
    ca = make_authority("guard-ca")
    leaf = write_leaf(tmp_path, ca, "guard", dns=["redis-placer-webhook.redis-placer.svc"])

    def admit(namespace: str, name: str, *, dry_run: bool = False) -> Admission:
        return Admission(name != "s0-m", "handing over", 429)

    server = WebhookServer(
        admit, cert_file=str(leaf.cert), key_file=str(leaf.key), port=0, host="127.0.0.1"
    )
    context = ssl.create_default_context(cadata=leaf.ca_cert.read_text())
    context.check_hostname = False  # the name is the Service's; the chain is what is checked
    with server:
        for name, allowed in (("s0-m", False), ("s0-r", True)):
            body = json.dumps(_request("evict", name)).encode()
            req = urllib.request.Request(
                f"https://127.0.0.1:{server.port}/validate",
                data=body,
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, context=context, timeout=10) as resp:
                answer = json.loads(resp.read())
            assert answer["response"]["allowed"] is allowed


def _replace_pod(adapter: FakeKubeAdapter, name: str) -> None:
    """The StatefulSet's new pod of the same name (its Redis, in the harness, the same)."""
    meta = adapter.pods[("default", name)]["metadata"]
    meta["uid"] = f"{meta['uid']}-next"
    meta.pop("annotations", None)


def test_a_master_and_its_replica_asked_to_stop_together_hand_over_once(
    redis_cluster: RedisClusterHarness,
) -> None:
    """OT rolls its leader and follower StatefulSets at once: pod k of each is deleted at the
    same moment, and both retry every few seconds. The replica goes first, the master waits for
    its new pod and hands over to it, then goes: one handover, never both pods gone, never a
    hold run out. Before, the role was handed to the replica, whose own stop then handed it
    back, and again, until both holds ran out and both pods went together."""
    h = redis_cluster
    adapter, ip = _cluster(h)
    now = [1000.0]

    def later(seconds: float = 6.0) -> None:  # the next retry: every reading is older
        now[0] += seconds

    guard, other = (_guard(h, adapter, clock=lambda: now[0]) for _ in range(2))  # two replicas
    master = guard.admit("default", "s1-m")
    assert not master.allowed and "hand over to default/s1-r" in master.message
    replica = other.admit("default", "s1-r")  # the other replica finds the request on the pod
    assert not replica.allowed and "handing shard default/cache/1 over first" in replica.message
    assert STOP_ASKED_ANNOTATION in adapter.pods[("default", "s1-r")]["metadata"]["annotations"]
    later()
    # the leader finds the replica about to stop: no handover to it, and the request is dropped
    done = other.step(leading=True)
    assert not any(line.startswith("handed") for line in done), done
    assert _role(h, ip["s1-m"]) == "master"
    assert HANDOVER_ANNOTATION not in adapter.pods[("default", "s1-m")]["metadata"].get(
        "annotations", {}
    )
    waiting = guard.admit("default", "s1-m")
    assert not waiting.allowed
    assert "default/s1-r of shard default/cache/1 is to stop too" in waiting.message
    assert guard.admit("default", "s1-r").allowed  # it goes first; its master serves
    # no reading shows the deletion yet, and the master's stop must not find the replica serving
    assert "default/s1-r is not Ready" in guard.admit("default", "s1-m").message
    _replace_pod(adapter, "s1-r")  # back, Ready and in sync
    later()
    assert not guard.admit("default", "s1-m").allowed
    assert "handed default/s1-m -> default/s1-r" in other.step(leading=True)
    h.wait_healthy()
    later()
    assert other.admit("default", "s1-m").allowed
    assert guard.admit("default", "s1-m").allowed
    assert _role(h, ip["s1-r"]) == "master"
    assert len([e for e in adapter.events if e["reason"] == "HandedOver"]) == 1
    assert not any(e["reason"] == "HoldReleased" for e in adapter.events)


def test_a_replica_let_stop_is_no_successor_before_its_deletion_is_read(
    redis_cluster: RedisClusterHarness,
) -> None:
    """Two deletes within the reading's second: the first (the replica) is let through, so the
    second (its master) must not be handed to it."""
    h = redis_cluster
    adapter, _ = _cluster(h)
    guard = _guard(h, adapter)
    assert guard.admit("default", "s0-r").allowed
    answer = guard.admit("default", "s0-m")
    assert not answer.allowed and "default/s0-r is not Ready" in answer.message
    assert not any(line.startswith("handed") for line in guard.step(leading=True))


def _all_labelled_master(adapter: FakeKubeAdapter) -> None:
    """As labelled while the cluster was forming: every server a master then."""
    for pod in adapter.pods.values():
        pod["metadata"]["labels"]["redis-role"] = "master"


def test_labels_that_name_every_pod_master_are_set_right_by_redis(
    redis_cluster: RedisClusterHarness,
) -> None:
    """Each shard reads as two masters by its labels; Redis says which is which, so the master
    is still held for its handover (not let through as a pod of no shard)."""
    adapter, _ = _cluster(redis_cluster)
    _all_labelled_master(adapter)
    answer = _guard(redis_cluster, adapter).admit("default", "s0-m")
    assert not answer.allowed and "hand over to default/s0-r" in answer.message


def test_a_pod_whose_shard_cannot_be_read_is_let_through_and_said_so(
    redis_cluster: RedisClusterHarness,
) -> None:
    """Redis unreachable (the wrong port) and labels that contradict each other: the guard has
    nothing to judge by, lets the eviction through, and says why, on the answer and the
    metric."""
    adapter, _ = _cluster(redis_cluster)
    _all_labelled_master(adapter)
    metrics = Metrics()
    guard = Guard(adapter, Policy(), port=1, metrics=metrics, restore=False)
    answer = guard.admit("default", "s0-m")
    assert answer.allowed
    (warning,) = answer.warnings
    assert warning.startswith("redis-placer guard: default/s0-m let through unchecked: shard ")
    assert "has 2 masters" in warning
    assert metrics.guard_admissions.labels(decision="unjudged")._value.get() == 1


def test_a_pod_the_guard_may_not_read_costs_only_its_own_cluster() -> None:
    """A managed pod in a namespace where the binder's ServiceAccount may not get pods: the
    guard's reading says so as a problem and goes on reading the other clusters, where the
    refused read used to end the reading (and with it every judgement: the guard then let
    every eviction through)."""
    from placer.kube.adapter import KubeApiError
    from placer.maintenance.reading import read_guard_view

    pods = [
        redis_pod("a-0", "a", 0, "master", node="n1"),
        redis_pod("b-0", "b", 0, "master", node="n2", namespace="team-b"),
    ]
    for i, pod in enumerate(pods):
        pod["status"] = {"phase": "Running", "podIP": f"127.0.0.{i + 2}"}

    class Forbidden(FakeKubeAdapter):
        def get_pod(self, namespace: str, name: str) -> Any:
            if namespace == "team-b":
                raise KubeApiError(f"get pod {namespace}/{name}", 403, "forbidden")
            return super().get_pod(namespace, name)

    adapter = Forbidden(nodes=[node("n1", "za", "ra"), node("n2", "zb", "rb")], pods=pods)
    view = read_guard_view(adapter, Policy(), port=1, timeout_s=0.2)
    assert view.dial is not None
    assert [line for line in view.problems if line.startswith("redis credentials")] == [
        "redis credentials: pod team-b/b-0: cannot read it for Redis cluster team-b/b's "
        "credentials: get pod team-b/b-0: HTTP 403: forbidden; that cluster is dialled with the "
        "policy's credentials only (this ServiceAccount needs get on pods in namespace team-b: "
        "list it among the namespaces that hold Redis)"
    ]
    assert {m.cluster for m in view.snapshot.members} == {"default/a", "team-b/b"}


def test_a_stop_asked_on_the_pod_counts_while_it_is_fresh(
    redis_cluster: RedisClusterHarness,
) -> None:
    """Another replica of the guard refused the replica's stop: the mark on the pod keeps the
    master from handing over to it, until the mark is a minute old (its asker gave up)."""
    import time

    h = redis_cluster
    adapter, _ = _cluster(h)
    fresh = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    adapter.annotate_pod("default", "s0-r", {STOP_ASKED_ANNOTATION: fresh})
    waiting = _guard(h, adapter).admit("default", "s0-m", dry_run=True)
    assert not waiting.allowed and "default/s0-r of shard default/cache/0 is to stop too" in (
        waiting.message
    )
    old = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 61))
    adapter.annotate_pod("default", "s0-r", {STOP_ASKED_ANNOTATION: old})
    handover = _guard(h, adapter).admit("default", "s0-m", dry_run=True)
    assert not handover.allowed and "hand over to default/s0-r" in handover.message


def test_a_pod_that_just_stood_for_election_is_handed_the_role_only_once_redis_lets_it(
    redis_cluster: RedisClusterHarness,
) -> None:
    """s0's role goes to s0-r, back to s0-m (the restore), and then s0-m's node is drained:
    s0-r stood for election moments ago, and Redis would let it stand again only 4 x
    cluster-node-timeout after (2 s here: 8 s), pausing s0-m's writes until then. The guard
    waits instead, s0-m serving, and hands over once that time is past. The times are on the
    pods too: another replica of the guard, or a new leader, knows them."""
    import time

    from placer.redis.elections import NO_ELECTION_UNTIL, NO_VOTES_UNTIL, node_timeout

    h = redis_cluster
    adapter, ip = _cluster(h)
    assert node_timeout(h.endpoint(ip["s0-m"])) == 2.0  # the harness's, read by CONFIG GET
    now = [time.time()]

    def guard_replica() -> Guard:
        return _guard(h, adapter, clock=lambda: now[0], wall_clock=lambda: now[0])

    guard = guard_replica()
    assert not guard.admit("default", "s0-m").allowed
    assert "handed default/s0-m -> default/s0-r" in guard.step(leading=True)
    marked = adapter.pods[("default", "s0-r")]["metadata"]["annotations"]
    assert NO_ELECTION_UNTIL in marked
    assert NO_VOTES_UNTIL in adapter.pods[("default", "s0-m")]["metadata"]["annotations"]
    h.wait_healthy()
    now[0] += 5.0  # past the masters' 4 s before they vote about s0-m again
    guard._view = None
    view = guard.current()
    assert view is not None
    master, successor = (guard._member(view, f"default/{name}") for name in ("s0-r", "s0-m"))
    assert guard.fail_over(view, master, successor, "restore").startswith("handed")
    h.wait_healthy()
    now[0] += 1.0
    for replica in (guard, guard_replica()):  # this replica remembers; another reads the pods
        replica._view = None
        held = replica.admit("default", "s0-m", dry_run=True)
        assert not held.allowed
        assert "Redis lets default/s0-r stand for election again at" in held.message
        assert "(4 x cluster-node-timeout after it stood)" in held.message
    now[0] += 8.0
    for replica in (guard, guard_replica()):
        replica._view = None
        moving = replica.admit("default", "s0-m", dry_run=True)
        assert not moving.allowed and "hand over to default/s0-r" in moving.message


def test_no_member_of_a_shard_goes_while_the_guard_fails_it_over(
    redis_cluster: RedisClusterHarness,
) -> None:
    """A drain began while the restore was failing s0 over to s0-r: the reading the answer
    would come from shows s0-r a replica still, and letting it go would leave s0 to a master
    that is not one any more. Any member of s0 waits until the failover is over."""
    from placer.redis.ops import FailoverResult, failover_to

    h = redis_cluster
    adapter, _ = _cluster(h)
    answers: list[Admission] = []

    def failover(*args: Any, **kwargs: Any) -> FailoverResult:
        answers.append(guard.admit("default", "s0-r"))  # the drain's eviction, meanwhile
        answers.append(guard.admit("default", "s0-m"))
        return failover_to(*args, **kwargs)

    guard = _guard(h, adapter, failover=failover)
    view = guard.current()
    assert view is not None
    master, successor = (guard._member(view, f"default/{name}") for name in ("s0-m", "s0-r"))
    assert guard.admit("default", "s0-r").allowed  # before: a replica whose master serves
    guard._let_go.clear()  # (that answer let nothing stop)
    assert guard.fail_over(view, master, successor, "restore").startswith("handed")
    assert [a.allowed for a in answers] == [False, False]
    assert all("shard default/cache/0 is failing over" in a.message for a in answers)
    h.wait_healthy()
    assert not guard.admit("default", "s0-r").allowed  # after: the master, to hand over


def test_a_replica_of_the_guard_that_did_not_fail_the_shard_over_lets_no_member_go_meanwhile(
    redis_cluster: RedisClusterHarness,
) -> None:
    """Two replicas of the guard answer the webhook; only the leader fails over. The other's
    reading, a second old at most, shows s0-r a replica whose master serves while the leader
    hands s0 over to it, and for a second after: it would let the shard's new master stop. The
    leader marks the failover on the master's pod before it begins and when it ends: the other
    replica refuses while it runs, and reads again before answering once it has ended."""
    from placer.redis.elections import FAILOVER_UNTIL
    from placer.redis.ops import FailoverResult, failover_to

    h = redis_cluster
    adapter, ip = _cluster(h)
    now = [1000.0]  # no time passes for the readings: the other's stays the one from before
    during: list[Admission] = []

    def failover(*args: Any, **kwargs: Any) -> FailoverResult:
        during.append(other.admit("default", "s0-r"))  # a drain's eviction, meanwhile
        return failover_to(*args, **kwargs)

    leader = _guard(h, adapter, failover=failover, clock=lambda: now[0])
    other = _guard(h, adapter, clock=lambda: now[0])
    before = other.current()
    view = leader.current()
    assert before is not None and view is not None
    master, successor = (leader._member(view, f"default/{name}") for name in ("s0-m", "s0-r"))
    assert leader.fail_over(view, master, successor, "restore").startswith("handed")
    (answer,) = during
    assert not answer.allowed
    assert "a failover from default/s0-m is under way" in answer.message
    h.wait_healthy()
    assert _role(h, ip["s0-r"]) == "master"
    assert other.current() is before  # its reading is from before the failover
    after = other.admit("default", "s0-r")  # the new master now: read again, it is held
    assert not after.allowed and "hand over to default/s0-m" in after.message
    ended = adapter.pods[("default", "s0-m")]["metadata"]["annotations"][FAILOVER_UNTIL]
    assert ended <= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def test_a_hold_counts_from_the_requests_of_this_disruption_only(
    redis_cluster: RedisClusterHarness,
) -> None:
    """A dry run, or a drain given up long ago, starts no hold: a real eviction of that master
    later is held for its handover, not let through as "held too long" at once (the e2e's own
    dry-run probe of the webhook did that to its guard-killed drain, 2 minutes later)."""
    from placer.maintenance.guard import HOLD_FORGOTTEN_S

    h = redis_cluster
    adapter, _ = _cluster(h)
    now = [1000.0]
    guard = _guard(h, adapter, max_hold_s=30.0, clock=lambda: now[0])
    assert not guard.admit("default", "s0-m", dry_run=True).allowed
    now[0] += 31.0
    guard._view = None
    answer = guard.admit("default", "s0-m")
    assert not answer.allowed and "held 0s" in answer.message
    now[0] += HOLD_FORGOTTEN_S + 1.0  # given up: then a new drain
    guard._view = None
    again = guard.admit("default", "s0-m")
    assert not again.allowed and "held 0s" in again.message
    now[0] += 31.0  # its retries: the bound holds from there
    guard._view = None
    assert guard.admit("default", "s0-m").allowed
