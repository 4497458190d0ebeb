"""Identity profiles: each deployment's pods, shaped as it makes them, read as the right
cluster, shard, role and shard size, through the same parser every command uses."""

from typing import Any

import pytest

from models.cluster import Role
from models.errors import InputError
from models.identity.expected import expected_members, is_expected
from models.identity.formations.create_order import masters_of
from models.identity.profiles import PROFILES
from models.identity.read import shard_selector, solver_picks_roles
from models.kube_objects import build_snapshot
from models.policy import Policy
from models.snapshot import Snapshot
from placer.binder.permit import decide, gangs
from placer.inputs.files import validate_policy
from tests import operator_shapes as shapes
from tests.kube_dicts import node


def profile(name: str, **identity: object) -> Policy:
    return Policy.model_validate({"identity": {"profile": name, **identity}})


def read(policy: Policy, sets: list[dict], pods: list[dict]) -> Snapshot:
    nodes = [node(f"n{i}", f"z{i % 3}", f"r{i}") for i in range(12)]
    return build_snapshot([*nodes, *sets, *pods], policy)


def layout(snap: Snapshot) -> dict[str, tuple[str, str, Role | None, int | None]]:
    return {m.pod.name: (m.cluster, m.shard, m.role, m.shard_size) for m in snap.members}


def test_ot_operator_leaders_are_masters_and_follower_j_replicates_leader_j_mod_leaders() -> None:
    sets = shapes.ot_operator("cache", leaders=3, followers=6)
    snap = read(profile("ot-operator"), sets, shapes.pods_of(sets))
    got = layout(snap)
    assert not [i for i in snap.issues if i.severity == "error"]
    for i in range(3):
        assert got[f"cache-leader-{i}"] == ("default/cache", str(i), Role.MASTER, 3)
    for j in range(6):
        assert got[f"cache-follower-{j}"] == ("default/cache", str(j % 3), Role.REPLICA, 3)
    assert all(m.ordered for m in snap.members)


def test_ot_operator_before_the_followers_exist_plans_for_them() -> None:
    """Followers come only once every leader is Ready: the leaders' shards are ordered and
    their size counts the followers to come (identity.replicasPerShard)."""
    sets = shapes.ot_operator("cache", leaders=3)
    pods = shapes.pods_of(sets)[:1]  # OrderedReady: leader-0 first
    snap = read(profile("ot-operator"), sets, pods)
    (member,) = snap.members
    assert (member.shard, member.role, member.shard_size, member.ordered) == (
        "0",
        Role.MASTER,
        2,
        True,
    )
    (stand_in,) = expected_members(snap)
    assert is_expected(stand_in) and stand_in.role is Role.REPLICA
    assert stand_in.shard_key == member.shard_key
    decision = decide(gangs(snap, {member.key}, {member.key: 0.0})[0], Policy().permit)
    assert decision.decision == "allow"
    assert "created only once these run" in decision.reason


def test_ot_operator_redis_role_label_is_the_truth_after_formation() -> None:
    sets = shapes.ot_operator("cache", leaders=3, followers=3)
    pods = shapes.pods_of(
        sets,
        nodes={
            f"cache-{k}-{i}": f"n{i * 2 + (k == 'follower')}"
            for k in ("leader", "follower")
            for i in range(3)
        },
    )
    for pod in pods:  # a failover in shard 1: the operator relabels both
        name = pod["metadata"]["name"]
        role = "master"
        if name.startswith("cache-follower") or name == "cache-leader-1":
            role = "slave"
        if name == "cache-follower-1":
            role = "master"
        pod["metadata"]["labels"]["redis-role"] = role
    got = layout(read(profile("ot-operator"), sets, pods))
    assert got["cache-leader-1"][2] is Role.REPLICA
    assert got["cache-follower-1"][2] is Role.MASTER
    assert got["cache-follower-0"][2] is Role.REPLICA


@pytest.mark.parametrize(
    ("nodes", "replicas", "expected"),
    [
        (6, 1, [0, 1, 2, 2, 0, 1]),
        (9, 2, [0, 1, 2, 2, 0, 0, 1, 1, 2]),
        (7, 1, [0, 1, 2, 0, 0, 1, 2]),
    ],
)
def test_create_order_follows_redis_cli(nodes: int, replicas: int, expected: list[int]) -> None:
    """The issue's worked examples (6 pods: 4 -> 0, 5 -> 1, 3 -> 2; 9 pods with 2 replicas:
    4,5 -> 0, 6,7 -> 1, 8,3 -> 2); tests/test_create_order_redis.py checks the real redis-cli."""
    assert masters_of(nodes, replicas) == expected


def test_bitnami_pods_are_read_in_redis_cli_create_order() -> None:
    sets = shapes.bitnami("orders", nodes=6)
    snap = read(profile("bitnami"), sets, shapes.pods_of(sets))
    got = layout(snap)
    name = "orders-redis-cluster-{}".format
    pairs = {0: 4, 1: 5, 2: 3}
    for master, replica in pairs.items():
        assert got[name(master)] == ("default/orders", str(master), Role.MASTER, 2)
        assert got[name(replica)] == ("default/orders", str(master), Role.REPLICA, 2)
    assert not any(m.ordered for m in snap.members)  # Parallel: the whole-shard hold stays


def test_bitnami_with_two_replicas_per_master() -> None:
    sets = shapes.bitnami("orders", nodes=9)
    got = layout(read(profile("bitnami", replicasPerShard=2), sets, shapes.pods_of(sets)))
    shard_of = {int(n.rsplit("-", 1)[1]): int(v[1]) for n, v in got.items()}
    assert shard_of == {0: 0, 1: 1, 2: 2, 3: 2, 4: 0, 5: 0, 6: 1, 7: 1, 8: 2}
    assert {v[3] for v in got.values()} == {3}


def statefulset_warnings(snap: Snapshot) -> list[str]:
    return [f"{i.object}: {i.message}" for i in snap.issues if i.object.startswith("statefulset")]


@pytest.mark.parametrize(
    ("nodes", "replicas", "says"),
    [
        (
            9,
            1,
            "9 pods (statefulset default/orders-redis-cluster spec.replicas) are not a "
            "multiple of 2 (identity.replicasPerShard 1 + 1): the shards are read with 1 of the 4 "
            "masters given an extra replica; if each master has 2 replicas (bitnami: the chart's "
            "cluster.replicas), set identity.replicasPerShard: 2",
        ),
        (
            6,
            2,
            "6 pods (statefulset default/orders-redis-cluster spec.replicas) in shards of 3 "
            "(identity.replicasPerShard 2) make 2 masters, and redis-cli --cluster create makes no "
            "cluster of fewer than 3; if each master has 1 replica (bitnami: the chart's "
            "cluster.replicas), set identity.replicasPerShard: 1",
        ),
        (
            15,
            1,
            "15 pods (statefulset default/orders-redis-cluster spec.replicas) are not a "
            "multiple of 2 (identity.replicasPerShard 1 + 1): the shards are read with 1 of the 7 "
            "masters given an extra replica; if each master has 2 or 4 replicas (bitnami: the "
            "chart's cluster.replicas), set identity.replicasPerShard to that number",
        ),
    ],
)
def test_a_replica_count_the_statefulset_contradicts_names_the_setting(
    nodes: int, replicas: int, says: str
) -> None:
    """From the StatefulSet alone (what the binder reads): a count the setting does not split
    as redis-cli would have is named, with the value that would."""
    sets = shapes.bitnami("orders", nodes=nodes)
    snap = read(profile("bitnami", replicasPerShard=replicas), sets, shapes.pods_of(sets))
    assert statefulset_warnings(snap) == [f"statefulset default/orders-redis-cluster: {says}"]


@pytest.mark.parametrize(("nodes", "replicas"), [(6, 1), (9, 2), (12, 1), (12, 2), (7, 1)])
def test_a_replica_count_that_splits_as_set_is_not_warned_of(nodes: int, replicas: int) -> None:
    """Counts redis-cli forms with the setting, extra replicas included where no other count
    would split the pods evenly (7 pods, 1 replica each: one master gets 2)."""
    sets = shapes.bitnami("orders", nodes=nodes)
    pods = shapes.pods_of(sets)
    assert (
        statefulset_warnings(read(profile("bitnami", replicasPerShard=replicas), sets, pods)) == []
    )


def test_role_labels_that_name_other_masters_name_the_setting() -> None:
    """12 pods split evenly either way; the role labels (as rebalance --relabel writes what
    Redis says) name 4 masters, so each has 2 replicas, not the 1 set."""
    sets = shapes.bitnami("orders", nodes=12)
    pods = shapes.pods_of(sets)
    for i, pod in enumerate(pods):
        pod["metadata"]["labels"]["redis-role"] = "master" if i < 4 else "replica"
    snap = read(profile("bitnami"), sets, pods)
    assert statefulset_warnings(snap) == [
        "statefulset default/orders-redis-cluster: the role labels name 4 masters among the 12 "
        "pods, but identity.replicasPerShard 1 reads 6, so the shards are read wrong; if each "
        "master has 2 replicas (bitnami: the chart's cluster.replicas), set "
        "identity.replicasPerShard: 2"
    ]
    right = read(profile("bitnami", replicasPerShard=2), sets, pods)
    assert statefulset_warnings(right) == []


def test_valkey_io_node_index_zero_is_the_primary_and_sizes_the_shard() -> None:
    sets = shapes.valkey_io("vk", shards=3, replicas=2)
    snap = read(profile("valkey-io"), sets, shapes.pods_of(sets))
    got = layout(snap)
    assert len(got) == 9
    for shard in range(3):
        for index in range(3):
            role = Role.MASTER if index == 0 else Role.REPLICA
            assert got[f"valkey-vk-{shard}-{index}-0"] == ("default/vk", str(shard), role, 3)
    assert not any(m.ordered for m in snap.members)  # one-pod StatefulSets: nothing to wait for


def test_hyperspike_shard_is_ordinal_mod_shards() -> None:
    sets = shapes.hyperspike("vk", shards=3, replicas=1)
    got = layout(read(profile("hyperspike"), sets, shapes.pods_of(sets)))
    for ordinal in range(6):
        role = Role.MASTER if ordinal < 3 else Role.REPLICA
        assert got[f"vk-{ordinal}"] == ("default/vk", str(ordinal % 3), role, 2)


def test_labels_profile_with_an_ordered_statefulset_is_placed_member_by_member() -> None:
    sts = shapes.statefulset(
        "redis-0",
        3,
        {"app": "redis", "redis-cluster": "c", "redis-shard": "0"},
        parallel=False,
    )
    pods = shapes.pods_of([sts])[:1]
    snap = read(Policy(), [sts], pods)
    (member,) = snap.members
    assert member.ordered and member.shard_size == 3 and member.role is None
    assert len(expected_members(snap)) == 2


def test_profiles_do_not_select_each_others_pods() -> None:
    """valkey-io and hyperspike both say app.kubernetes.io/name: valkey; each profile takes
    only its own deployment's pods."""
    everything = [
        *shapes.ot_operator("ot", leaders=3, followers=3),
        *shapes.bitnami("bn"),
        *shapes.valkey_io("vi", shards=3, replicas=1),
        *shapes.hyperspike("hs", shards=3, replicas=1),
    ]
    pods = shapes.pods_of(everything)
    for name, cluster in [
        ("ot-operator", "default/ot"),
        ("bitnami", "default/bn"),
        ("valkey-io", "default/vi"),
        ("hyperspike", "default/hs"),
    ]:
        snap = read(profile(name), everything, pods)
        assert {m.cluster for m in snap.members} == {cluster}, name
        assert len(snap.members) == 6, name


def test_a_pod_without_an_ordinal_is_skipped_with_a_message_naming_it() -> None:
    sets = shapes.bitnami("orders", nodes=6)
    pods = shapes.pods_of(sets)
    stray = pods[0]
    stray["metadata"]["name"] = "orders-debug"
    stray["metadata"]["labels"].pop("apps.kubernetes.io/pod-index")
    snap = read(profile("bitnami"), sets, pods)
    assert "default/orders-debug" not in {m.key for m in snap.members}
    (issue,) = [i for i in snap.issues if "orders-debug" in i.object]
    assert "ordinal" in issue.message


def test_unknown_profile_is_an_error_naming_the_key() -> None:
    with pytest.raises(InputError) as caught:
        validate_policy({"identity": {"profile": "ot"}}, "policy p.yaml")
    assert caught.value.field == "identity.profile"
    assert "'ot'" in str(caught.value) and "ot-operator" in str(caught.value)


def test_a_profile_fills_in_only_what_the_file_leaves_out() -> None:
    policy = Policy.model_validate(
        {"identity": {"profile": "bitnami", "replicasPerShard": 2}, "selector": {"app": "x"}}
    )
    assert policy.selector == {"app": "x"}
    assert policy.identity.formation == "create-order"
    assert policy.identity.replicas_per_shard == 2
    assert policy.labels.cluster == "app.kubernetes.io/instance"


def test_every_profile_is_a_valid_policy() -> None:
    for name in PROFILES:
        assert profile(name).identity.profile == name


def test_only_redis_placers_own_labels_let_the_plan_choose_roles() -> None:
    assert solver_picks_roles(Policy())
    assert not any(solver_picks_roles(profile(n)) for n in PROFILES if n != "labels")


def test_shard_selector_selects_by_pod_name_without_a_shard_label() -> None:
    selector = shard_selector(
        profile("bitnami"), "orders", "0", ["orders-redis-cluster-4", "orders-redis-cluster-0"]
    )
    assert selector["matchLabels"] == {"app.kubernetes.io/name": "redis-cluster"}
    assert selector["matchExpressions"][0]["values"] == [
        "orders-redis-cluster-0",
        "orders-redis-cluster-4",
    ]
    own = shard_selector(Policy(), "c", "1", [])
    assert own == {"matchLabels": {"app": "redis", "redis-cluster": "c", "redis-shard": "1"}}


def test_the_binder_places_an_ordered_shards_first_member_at_once() -> None:
    """An OT leader arrives alone (OrderedReady): it is bound in the first step, no window and
    no whole-shard hold, and the stand-in for its follower is never bound."""
    from placer.binder.loop import Binder, BinderConfig
    from placer.kube.fake import FakeKubeAdapter

    policy = profile("ot-operator")
    sets = shapes.ot_operator("cache", leaders=3)
    pods = shapes.pods_of(sets)[:1]
    for pod in pods:
        pod["spec"]["schedulerName"] = policy.scheduler_name
    fake = FakeKubeAdapter(
        nodes=[node(f"n{i}", f"z{i % 3}", f"r{i}") for i in range(6)],
        pods=pods,
        statefulsets=sets,
    )
    report = Binder(fake, policy, BinderConfig()).step(now=1000.0)
    assert [d.decision for d in report.decisions] == ["allow"]
    assert [key for key, _ in fake.binds] == [("default", "cache-leader-0")]


def test_identities_kept_between_reads_are_those_a_fresh_read_gives() -> None:
    """The binder's parse cache keeps identities per pod: each read, after a StatefulSet
    scaled, a pod relabelled or a bad annotation added, says what a read without it says."""
    from models.kube_objects import ParseCache

    labels = {"app": "redis", "redis-cluster": "c", "redis-shard": "0"}
    sts = shapes.statefulset("redis-0", 3, labels, parallel=True)
    pods = shapes.pods_of([sts])
    for i, pod in enumerate(pods):
        pod["metadata"].update(uid=f"p{i}", resourceVersion="1")
    cache = ParseCache()

    def same(objects: list[dict]) -> None:
        kept, fresh = (
            build_snapshot([node("n0", "z0", "r0"), *objects], Policy(), c) for c in (cache, None)
        )
        assert [(m.key, m.shard_key, m.role, m.shard_size, m.ordered) for m in kept.members] == [
            (m.key, m.shard_key, m.role, m.shard_size, m.ordered) for m in fresh.members
        ]
        assert kept.issues == fresh.issues

    same([sts, *pods])
    same([sts, *pods])  # read again: from the memo
    scaled = {**sts, "spec": {**sts["spec"], "replicas": 5}}
    same([scaled, *pods])
    ordered = {**sts, "spec": {k: v for k, v in sts["spec"].items() if k != "podManagementPolicy"}}
    same([ordered, *pods])
    relabelled = {**pods[0], "metadata": {**pods[0]["metadata"], "resourceVersion": "2"}}
    relabelled["metadata"]["labels"] = {**labels, "redis-role": "master"}
    odd = {**pods[1], "metadata": {**pods[1]["metadata"], "resourceVersion": "2"}}
    odd["metadata"]["annotations"] = {"redis-placer.io/shard-size": "many"}
    same([scaled, relabelled, odd, pods[2]])


def test_the_memo_keeps_an_identity_across_a_binding_and_reads_a_new_role_annotation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bound pod is a new object with the same labels: its identity is not read again; the
    binder's role annotation changes what it reads, and it is."""
    from models.cluster import Pod
    from models.identity import read as read_module
    from models.identity.common import ROLE_ANNOTATION
    from models.identity.read import IdentityMemo

    policy = Policy()
    pending = Pod(
        namespace="default",
        name="c-0-0",
        labels={"app": "redis", "redis-cluster": "c", "redis-shard": "0"},
    )
    reads: list[str] = []
    real = read_module.labels.read

    def counted(pods: Any, *args: Any) -> Any:
        reads.extend(p.key for p in pods)
        return real(pods, *args)

    monkeypatch.setattr(read_module.labels, "read", counted)
    memo = IdentityMemo()
    first = memo.read([pending], {}, policy, [])["default/c-0-0"]
    bound = pending.model_copy(update={"node_name": "n1", "phase": "Running"})
    assert memo.read([bound], {}, policy, [])["default/c-0-0"] == first
    assert reads == ["default/c-0-0"]
    labelled = bound.model_copy(update={"annotations": {ROLE_ANNOTATION: "master"}})
    again = memo.read([labelled], {}, policy, [])["default/c-0-0"]
    assert reads == ["default/c-0-0", "default/c-0-0"]
    assert getattr(again, "role", None) is Role.MASTER
