"""Reading PVs, claims and storage classes into what each pod's volumes ask of its node."""

import pytest

from models.cluster import VolumeNeed
from models.errors import InputError
from models.kube_objects import build_snapshot
from models.policy import Policy
from tests.kube_dicts import node, redis_pod
from tests.volume_dicts import claim, local_pv, mounts, storage_class

NODES = [node("n1", "a", "r1"), node("n2", "b", "r2")]


def _pod_volumes(objects: list[dict[str, object]]) -> tuple[VolumeNeed, ...]:
    snap = build_snapshot([*NODES, *objects], Policy())
    (member,) = snap.members
    return member.pod.volumes


def test_claims_come_from_pvc_and_ephemeral_volumes() -> None:
    pod = redis_pod("p-0", "c", 0, "master", **mounts("data-p-0"))
    pod["spec"]["volumes"].append({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}})
    snap = build_snapshot([*NODES, pod], Policy())
    assert snap.members[0].pod.claims == ("data-p-0", "p-0-scratch")


def test_bound_claim_takes_its_pvs_node_affinity() -> None:
    (need,) = _pod_volumes(
        [
            storage_class("local-nvme"),
            local_pv("pv-1", node="n2", claim="default/data-p-0"),
            claim("data-p-0", volume="pv-1"),
            redis_pod("p-0", "c", 0, "master", **mounts("data-p-0")),
        ]
    )
    assert need.rule.kind == "bound"
    assert need.volume == "pv-1"
    assert need.rule.terms[0].match_expressions[0].values == ("n2",)


def test_unbound_local_claim_lists_the_free_pvs_that_match() -> None:
    (need,) = _pod_volumes(
        [
            storage_class("local-nvme"),
            local_pv("pv-small", node="n1", capacity="1Gi"),
            local_pv("pv-big", node="n2", capacity="100Gi"),
            local_pv("pv-rox", node="n2", modes=("ReadOnlyMany",)),
            local_pv("pv-taken", node="n1", claim="default/other"),
            local_pv("pv-other-class", node="n1", storage_class="slow"),
            claim("data-p-0", request="5Gi"),
            redis_pod("p-0", "c", 0, "master", **mounts("data-p-0")),
        ]
    )
    assert need.rule.kind == "local"
    assert need.rule.pool == "local-nvme"
    assert [v.name for v in need.rule.volumes] == ["pv-big"]


def test_provisioned_class_restricts_to_its_allowed_topologies() -> None:
    (need,) = _pod_volumes(
        [
            storage_class("zonal", provisioner="ebs.csi.aws.com", zones=("b",)),
            claim("data-p-0", storage_class="zonal"),
            redis_pod("p-0", "c", 0, "master", **mounts("data-p-0")),
        ]
    )
    assert need.rule.kind == "zonal"
    assert need.rule.terms[0].match_expressions[0].values == ("b",)


def test_default_class_applies_when_the_claim_names_none() -> None:
    (need,) = _pod_volumes(
        [
            storage_class("zonal", provisioner="ebs.csi.aws.com", default=True),
            claim("data-p-0", storage_class=None),
            redis_pod("p-0", "c", 0, "master", **mounts("data-p-0")),
        ]
    )
    assert need.rule.kind == "zonal"


@pytest.mark.parametrize(
    ("objects", "says"),
    [
        ([storage_class("fast", mode="Immediate"), claim("data-p-0", "fast")], "Immediate"),
        ([claim("data-p-0", "missing")], "missing"),
        ([claim("data-p-0", volume="pv-gone")], "pv-gone"),
    ],
)
def test_claims_that_hold_their_pod_say_why(objects: list[dict[str, object]], says: str) -> None:
    (need,) = _pod_volumes([*objects, redis_pod("p-0", "c", 0, "master", **mounts("data-p-0"))])
    assert need.rule.kind == "held"
    assert says in need.rule.reason
    assert "default/data-p-0" in need.rule.reason


def test_a_missing_claim_of_a_pending_pod_is_no_constraint_and_a_warning() -> None:
    snap = build_snapshot(
        [*NODES, storage_class("local-nvme"), redis_pod("p-0", "c", 0, "master", **mounts("x"))],
        Policy(),
    )
    assert snap.members[0].pod.volumes == ()
    (issue,) = [i for i in snap.issues if i.object == "pod default/p-0"]
    assert issue.severity == "warning"
    assert "default/x" in issue.message


def test_free_volumes_are_available_pvs_without_a_claim() -> None:
    fresh = local_pv("pv-0", node="n1")
    del fresh["status"]  # just created: no PV controller has marked it Available yet
    released = local_pv("pv-3", node="n1")
    released["status"]["phase"] = "Released"
    snap = build_snapshot(
        [
            *NODES,
            fresh,
            local_pv("pv-1", node="n1"),
            local_pv("pv-2", node="n2", claim="default/c"),
            released,
        ],
        Policy(),
    )
    assert [v.name for v in snap.free_volumes] == ["pv-1"]  # kube-scheduler binds no other


def test_a_malformed_pv_capacity_names_the_object_and_field() -> None:
    bad = local_pv("pv-1", node="n1", capacity="ten gigs")
    with pytest.raises(InputError) as err:
        build_snapshot([*NODES, bad], Policy())
    assert err.value.obj == "pv pv-1"
    assert err.value.field == "spec.capacity.storage"


def test_a_claim_that_appears_twice_is_an_error() -> None:
    with pytest.raises(InputError) as err:
        build_snapshot([*NODES, claim("d"), claim("d")], Policy())
    assert err.value.obj == "pvc default/d"


def test_a_live_read_lists_volumes_through_the_adapter() -> None:
    from placer.inputs.live import snapshot_from_adapter
    from placer.kube.fake import FakeKubeAdapter

    adapter = FakeKubeAdapter(
        nodes=NODES,
        pods=[redis_pod("p-0", "c", 0, "master", **mounts("data-p-0"))],
        volume_objects=[
            storage_class("local-nvme"),
            local_pv("pv-1", node="n2"),
            claim("data-p-0"),
        ],
    )
    snap = snapshot_from_adapter(adapter, Policy())
    (need,) = snap.members[0].pod.volumes
    assert [v.name for v in need.rule.volumes] == ["pv-1"]
