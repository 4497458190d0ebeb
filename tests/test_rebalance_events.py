"""rebalance --apply names each pod whose Redis did not answer, in an Event on the pod."""

from models.kube_objects import build_snapshot
from models.policy import Policy
from models.snapshot import Issue
from placer.kube.fake import FakeKubeAdapter
from placer.rebalance.events import record_unanswered
from placer.redis.roles import RoleReading
from tests.kube_dicts import node, redis_pod


def test_a_pod_that_did_not_answer_gets_a_warning_naming_why_and_the_others_none() -> None:
    objects = [
        node("n1", "a", "r1"),
        node("n2", "b", "r2"),
        redis_pod("c-0-0", "c", 0, "master", "n1"),
        redis_pod("c-0-1", "c", 0, "replica", "n2"),
    ]
    snapshot = build_snapshot(objects, Policy())
    why = "CLUSTER NODES not read (10.0.0.2:6379 unreachable: no answer within 5s); label role kept"
    reading = RoleReading(
        roles={},
        tried=("default/c-0-0", "default/c-0-1"),
        read=("default/c-0-0",),
        issues=(Issue(object="pod default/c-0-1", message=why, severity="warning"),),
    )
    fake = FakeKubeAdapter()
    assert record_unanswered(fake, snapshot, reading) == 1
    [event] = fake.events
    assert event["reason"] == "RedisUnanswered" and event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "c-0-1"
    assert why in event["message"]
