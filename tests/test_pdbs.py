"""Per-shard PodDisruptionBudgets: ``redis-placer pdbs`` and ``binder --manage-pdbs`` (fake
adapter), each object checked against Kubernetes' own schema."""

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from kubernetes_validate.utils import latest_version

from models.kube_objects import flatten
from models.policy import Policy
from models.synthetic import generate_cluster
from placer.binder.loop import Binder, BinderConfig
from placer.binder.pdbs import decide
from placer.cli import main
from placer.kube.fake import FakeKubeAdapter
from placer.kube.pdb import pdb_name, selector_matches
from tests.kube_dicts import node, redis_pod, snapshot

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def valid(doc: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(doc, latest_version(), strict=True)
    except kubernetes_validate.ValidationError as err:
        pytest.fail(f"{doc['metadata']['name']}: {err.message}")


def write_dump(tmp_path: Path, objects: list[dict[str, Any]]) -> str:
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)


# -- names and the command -------------------------------------------------------------------


def test_names_are_deterministic_dns_labels() -> None:
    assert pdb_name("redis", "0") == "redis-shard-0"  # as deploy/examples names them by hand
    odd = pdb_name("My_Cache.v2", "Shard 7")
    assert DNS_LABEL.match(odd) and odd == pdb_name("My_Cache.v2", "Shard 7")
    assert odd.startswith("my-cache-v2-shard-shard-7-")
    # Two names that read alike once made safe stay apart.
    assert pdb_name("a_b", "0") != pdb_name("a-b", "0")
    long = pdb_name("c" * 80, "12")
    assert len(long) <= 63 and DNS_LABEL.match(long)


def test_pdbs_prints_one_valid_budget_per_shard(tmp_path: Path) -> None:
    objects = [node(f"n{i}", f"z{i}", f"r{i}") for i in range(3)]
    objects += [
        redis_pod("c-0-0", "cache", 0, "master", node="n0", namespace="redis"),
        redis_pod("c-0-1", "cache", 0, "replica", node="n1", namespace="redis"),
        redis_pod("c-1-0", "cache", 1, None, namespace="redis"),  # pending shards count too
        redis_pod("w-0-0", "Web_Cache", "a", "master", node="n2", namespace="apps"),
    ]
    result = CliRunner().invoke(main, ["pdbs", "-f", write_dump(tmp_path, objects)])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs] == [
        ("apps", pdb_name("Web_Cache", "a")),
        ("redis", "cache-shard-0"),
        ("redis", "cache-shard-1"),
    ]
    # One member fewer than the shard has, as a number: maxUnavailable would count every pod
    # of the members' controllers (placer.kube.pdb).
    assert [d["spec"]["minAvailable"] for d in docs] == [0, 1, 0]
    for doc in docs:
        valid(doc)
        assert doc["apiVersion"] == "policy/v1" and "maxUnavailable" not in doc["spec"]
        assert DNS_LABEL.match(doc["metadata"]["name"])
    assert docs[1]["spec"]["selector"] == {
        "matchLabels": {"app": "redis", "redis-cluster": "cache", "redis-shard": "0"}
    }
    # The selector takes exactly the shard's pods.
    pods = {o["metadata"]["name"]: o["metadata"]["labels"] for o in objects if o["kind"] == "Pod"}
    selector = docs[1]["spec"]["selector"]
    assert sorted(n for n, labels in pods.items() if selector_matches(selector, labels)) == [
        "c-0-0",
        "c-0-1",
    ]
    listed = CliRunner().invoke(main, ["pdbs", "-f", write_dump(tmp_path, objects), "-o", "json"])
    assert yaml.safe_load(listed.stdout)["items"] == docs


def test_a_budgets_match_expressions_follow_label_selector_rules() -> None:
    """A user's own budget may select by expressions; an empty selector takes every pod, a
    missing one none."""
    labels = {"app": "redis", "tier": "cache"}

    def expression(op: str, key: str, *values: str) -> dict[str, object]:
        return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}

    assert selector_matches(expression("In", "tier", "cache", "db"), labels)
    assert not selector_matches(expression("In", "tier", "db"), labels)
    assert selector_matches(expression("NotIn", "tier", "db"), labels)
    assert not selector_matches(expression("NotIn", "tier", "cache"), labels)
    assert selector_matches(expression("NotIn", "zone", "a"), labels)  # absent: not in
    assert selector_matches(expression("Exists", "app"), labels)
    assert not selector_matches(expression("Exists", "zone"), labels)
    assert selector_matches(expression("DoesNotExist", "zone"), labels)
    assert not selector_matches(expression("DoesNotExist", "app"), labels)
    assert selector_matches({}, labels) and not selector_matches(None, labels)
    assert not selector_matches({"matchLabels": {"app": "valkey"}}, labels)


def test_pdbs_follows_the_policys_labels(tmp_path: Path) -> None:
    pod = redis_pod("x-0", "ignored", 0, "master", node="n0")
    pod["metadata"]["labels"] = {"team": "kv", "db": "kv1", "slot-range": "3", "r": "master"}
    policy = tmp_path / "policy.yaml"
    policy.write_text("selector: {team: kv}\nlabels: {cluster: db, shard: slot-range, role: r}\n")
    dump = write_dump(tmp_path, [node("n0", "z0", "r0"), pod])
    result = CliRunner().invoke(main, ["pdbs", "-f", dump, "-p", str(policy)])
    (doc,) = yaml.safe_load_all(result.stdout)
    assert doc["metadata"]["name"] == "kv1-shard-3"
    assert doc["spec"]["selector"]["matchLabels"] == {"team": "kv", "db": "kv1", "slot-range": "3"}


def test_pdbs_without_a_shard_is_an_error(tmp_path: Path) -> None:
    dump = write_dump(tmp_path, [node("n0", "z", "r")])
    result = CliRunner().invoke(main, ["pdbs", "-f", dump])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: {dump}: selector: no Pod objects (only 1 nodes): nothing to judge; "
        "pass --allow-empty to accept it\n"
    )
    accepted = CliRunner().invoke(main, ["pdbs", "-f", dump, "--allow-empty", "-o", "json"])
    assert accepted.exit_code == 0 and accepted.stderr == ""
    assert json.loads(accepted.stdout) == {"apiVersion": "v1", "kind": "List", "items": []}


def test_pdbs_of_finished_pods_only_is_an_error(tmp_path: Path) -> None:
    """Succeeded or Failed pods hold no shard: an input of only those has nothing to cover."""
    done = redis_pod("c-0-0", "cache", 0, "master", node="n0")
    done["status"]["phase"] = "Succeeded"
    dump = write_dump(tmp_path, [node("n0", "z", "r"), done])
    result = CliRunner().invoke(main, ["pdbs", "-f", dump])
    assert result.exit_code == 2 and result.stdout == ""
    assert "every pod the policy selector app=redis matches has finished (1 Succeeded" in (
        result.stderr
    )


# -- the binder ------------------------------------------------------------------------------


class CountingFake(FakeKubeAdapter):
    """The fake, counting PDB lists (the binder must not list on every step)."""

    lists = 0

    def list_pdbs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        self.lists += 1
        return super().list_pdbs(namespace)


def fake_cluster(shards: int = 3, owned: bool = False) -> CountingFake:
    objs = flatten([generate_cluster(12, shards)])
    pods = [o for o in objs if o["kind"] == "Pod"]
    sets = []
    if owned:
        for pod in (p for p in pods if p["metadata"]["labels"].get("app") == "redis"):
            labels = pod["metadata"]["labels"]
            name = f"{labels['redis-cluster']}-{labels['redis-shard']}"
            pod["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": name,
                    "uid": f"uid-{name}",
                    "controller": True,
                }
            ]
        for s in range(shards):
            name = f"redis-0-{s}"
            sets.append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "metadata": {"name": name, "namespace": "redis", "uid": f"uid-{name}"},
                    "spec": {"replicas": 3, "podManagementPolicy": "Parallel"},
                }
            )
    return CountingFake(
        nodes=[o for o in objs if o["kind"] == "Node"], pods=pods, statefulsets=sets
    )


def place_all(fake: FakeKubeAdapter, config: BinderConfig) -> Binder:
    binder = Binder(fake, Policy(), config)
    first = binder.step(now=1000.0)  # gate mode places at once: kube-scheduler is idle
    report = first if first.bound else binder.step(now=1001.5)
    assert report.bound and not report.unplaced, report
    binder.cache.poll(0)
    return binder


def test_the_binder_creates_a_budget_per_shard_it_places() -> None:
    fake = fake_cluster(owned=True)
    place_all(fake, BinderConfig(manage_pdbs=True))
    assert sorted(fake.pdbs) == [("redis", f"redis-0-shard-{s}") for s in range(3)]
    for pdb in fake.pdbs.values():
        valid({k: v for k, v in pdb.items()})
        meta = pdb["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "redis-placer-binder"
        shard = meta["labels"]["redis-shard"]
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": f"redis-0-{shard}",
                "uid": f"uid-redis-0-{shard}",
            }
        ]
        members = [
            p for p in fake.pods.values() if p["metadata"]["labels"].get("redis-shard") == shard
        ]
        assert pdb["spec"] == {
            "minAvailable": len(members) - 1,
            "selector": {
                "matchLabels": {"app": "redis", "redis-cluster": "redis-0", "redis-shard": shard}
            },
        }


def test_no_owner_without_a_statefulset_and_nothing_without_the_flag() -> None:
    fake = fake_cluster()
    place_all(fake, BinderConfig(manage_pdbs=True))
    assert len(fake.pdbs) == 3
    assert all("ownerReferences" not in p["metadata"] for p in fake.pdbs.values())
    off = fake_cluster()
    place_all(off, BinderConfig())
    assert off.pdbs == {} and off.lists == 0


def test_a_budget_goes_with_its_shard_and_quiet_steps_do_not_list() -> None:
    fake = fake_cluster()
    binder = place_all(fake, BinderConfig(manage_pdbs=True))
    binder.step(now=1002.0)  # sees the binds the watch brought
    listed = fake.lists
    binder.step(now=1003.0)
    binder.step(now=1004.0)
    assert fake.lists == listed  # nothing changed: no API call
    for key in [
        k for k, p in fake.pods.items() if p["metadata"]["labels"].get("redis-shard") == "1"
    ]:
        fake.delete_pod(*key)
    binder.cache.poll(0)
    binder.step(now=1005.0)
    assert sorted(n for _, n in fake.pdbs) == ["redis-0-shard-0", "redis-0-shard-2"]
    binder.step(now=1005.0 + 31)  # the periodic look finds nothing more to do
    assert fake.lists == listed + 2 and len(fake.pdbs) == 2


def test_a_shard_another_budget_covers_is_left_alone() -> None:
    fake = fake_cluster()
    fake.create_pdb(
        "redis",
        {
            "metadata": {"name": "by-hand", "namespace": "redis"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"redis-shard": "0"}}},
        },
    )
    place_all(fake, BinderConfig(manage_pdbs=True))
    assert sorted(n for _, n in fake.pdbs) == ["by-hand", "redis-0-shard-1", "redis-0-shard-2"]


def test_gate_mode_places_and_covers_pinned_shards() -> None:
    objs = flatten([generate_cluster(12, 2)])
    pods = [o for o in objs if o["kind"] == "Pod"]
    for pod in (p for p in pods if p["metadata"]["labels"].get("app") == "redis"):
        pod["spec"].pop("schedulerName")
        pod["spec"]["schedulingGates"] = [{"name": "redis-placer.io/placement"}]
    fake = CountingFake(nodes=[o for o in objs if o["kind"] == "Node"], pods=pods)
    place_all(fake, BinderConfig(enforce="gate", manage_pdbs=True))
    assert sorted(n for _, n in fake.pdbs) == ["redis-0-shard-0", "redis-0-shard-1"]


def test_decide_keeps_a_budget_while_a_skipped_shard_still_runs() -> None:
    """Two masters make the snapshot skip a shard; its pods still run, so its budget stays."""
    nodes = [node("n0", "z0", "r0"), node("n1", "z1", "r1")]
    pods = [
        redis_pod("k-0-0", "k", 0, "master", node="n0", schedulerName="redis-placer"),
        redis_pod("k-0-1", "k", 0, "master", node="n1", schedulerName="redis-placer"),
    ]
    snap = snapshot(nodes, pods)
    assert snap.shards == {}

    def binder_pdb(shard: str) -> dict[str, Any]:
        labels = {"redis-cluster": "k", "redis-shard": shard}
        labels["app.kubernetes.io/managed-by"] = "redis-placer-binder"
        meta = {"name": f"k-shard-{shard}", "namespace": "default", "uid": f"u{shard}"}
        return {"metadata": {**meta, "labels": labels}}

    mine, gone = binder_pdb("0"), binder_pdb("9")
    changes = decide(snap, Policy(), "bind", [mine, gone])
    assert changes.delete == [("default", "k-shard-9", "u9")] and changes.create == []
