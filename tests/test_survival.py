"""The survival verdict: per level, survived or which domain takes what; where no placement
could survive, why and what would. Every count below is worked out by hand."""

import json

import pytest

from models.policy import Policy
from solver.check import keep_plan
from solver.survival import (
    cannot_survive,
    majority_possible,
    plural,
    survival_after,
    survival_verdicts,
    verdicts_for,
)
from tests.kube_dicts import node, redis_pod, snapshot


@pytest.mark.parametrize(
    ("masters", "domains", "possible"),
    [
        (1, 3, False),
        (2, 3, False),  # losing either master's zone leaves 1 of 2
        (3, 3, True),  # one per zone: 2 of 3 left
        (4, 3, False),  # some zone holds 2 of 4: 2 left, no majority
        (5, 3, True),  # 2 + 2 + 1: 3 of 5 left
        (6, 3, True),  # 2 + 2 + 2: 4 of 6 left
        (4, 4, True),
        (6, 2, False),  # two zones: one holds half or more
        (9, 2, False),
    ],
)
def test_a_majority_can_outlive_one_domain_only_with_fewer_than_half_in_each(
    masters: int, domains: int, possible: bool
) -> None:
    assert majority_possible(masters, domains) is possible


def test_four_masters_over_three_zones_say_what_would_survive() -> None:
    note = cannot_survive("redis/cache", 4, {str(s): 2 for s in range(4)}, 3, "zone")
    assert note == (
        "redis/cache has 4 masters over 3 zones: some zone holds 2 of them, and the 2 left are "
        "no majority; 5 or more shards would survive (or 3), and so would 4 zones"
    )


def test_three_masters_over_two_zones_say_the_one_left_is_no_majority() -> None:
    """Every count said agrees with its noun and verb: "the 1 left is", "2 zones", "1 zone"."""
    note = cannot_survive("r/s", 3, {str(s): 2 for s in range(3)}, 2, "zone")
    assert note is not None and note.startswith(
        "r/s has 3 masters over 2 zones: some zone holds 2 of them, and the 1 left is no majority; "
    )
    assert [plural(n, "zone") for n in (0, 1, 2)] == ["0 zones", "1 zone", "2 zones"]


def test_a_two_master_cluster_cannot_survive_any_domain() -> None:
    sizes = {"0": 2, "1": 2}
    assert cannot_survive("r/s", 2, sizes, 3, "zone") == (
        "r/s has 2 masters: losing one leaves 1 of 2, no majority; 3, or 5 and more, shards "
        "would survive"
    )
    assert cannot_survive("r/s", 2, sizes, 12, "host") == (
        "r/s has 2 masters: losing one leaves 1 of 2, no majority; 3 or more shards would survive"
    )


def test_one_zone_two_zones_and_shards_without_replicas() -> None:
    three = {str(s): 2 for s in range(3)}
    assert "the nodes it can run on are in one zone" in str(
        cannot_survive("r/s", 3, three, 1, "zone")
    )
    assert "a third zone would" in str(cannot_survive("r/s", 5, three, 2, "zone"))
    single = {"0": 1, "1": 2, "2": 2}
    assert cannot_survive("r/s", 3, single, 3, "zone") == (
        "r/s: shard 0 has one member, lost with its zone; a replica each would survive"
    )
    assert cannot_survive("r/s", 3, three, 3, "zone") is None


NODES = [node(f"{z}{i}", z, f"{z}{i}") for z in "abc" for i in (1, 2)]


def _cluster(layout: dict[int, tuple[str, str]], name: str = "c") -> list[dict[str, object]]:
    pods: list[dict[str, object]] = []
    for shard, (master, replica) in layout.items():
        pods.append(redis_pod(f"{name}-{shard}-0", name, shard, "master", node=master))
        pods.append(redis_pod(f"{name}-{shard}-1", name, shard, "replica", node=replica))
    return pods


def test_the_verdict_names_the_domain_and_what_it_takes() -> None:
    """Zone a holds 2 of 3 masters: the zone level loses the majority; hosts and racks (each
    one node) hold one master each and survive."""
    snap = snapshot(NODES, _cluster({0: ("a1", "b1"), 1: ("a2", "c1"), 2: ("b2", "c2")}))
    verdicts = survival_verdicts(snap, Policy(), keep_plan(snap))
    assert [(v.level, v.survived, v.severity, v.domains) for v in verdicts] == [
        ("host", True, "soft", 6),
        ("rack", True, "soft", 6),
        ("zone", False, "soft", 3),
    ]
    [takes] = verdicts[2].takes
    assert (takes.domain, takes.cluster, takes.masters_left, takes.masters) == (
        "a",
        "default/c",
        1,
        3,
    )
    assert takes.majority_lost and takes.shards_lost == []
    assert all(v.cannot_survive == [] for v in verdicts)
    hard = survival_verdicts(
        snap, Policy.model_validate({"rules": {"survive": "zone"}}), keep_plan(snap)
    )
    assert hard[2].severity == "hard"


def test_a_shard_inside_one_zone_is_taken_whole() -> None:
    snap = snapshot(NODES, _cluster({0: ("a1", "a2"), 1: ("b1", "c1"), 2: ("c2", "b2")}))
    zone = survival_verdicts(snap, Policy(), keep_plan(snap))[2]
    [takes] = zone.takes
    assert (takes.domain, takes.shards_lost, takes.majority_lost) == ("a", ["0"], False)


def test_the_verdict_of_some_clusters_counts_only_theirs() -> None:
    """The binder's batch: cluster d cannot survive (2 masters), c survives; asked about c
    alone, the verdict is c's."""
    pods = _cluster({0: ("a1", "b1"), 1: ("b2", "c1"), 2: ("c2", "a2")})
    pods += _cluster({0: ("a1", "b1"), 1: ("b2", "c1")}, name="d")
    snap = snapshot(NODES, pods, Policy.model_validate({"rules": {"maxMastersPerNode": 2}}))
    policy = Policy.model_validate({"rules": {"maxMastersPerNode": 2}})
    alone = verdicts_for(snap, policy, keep_plan(snap), {"default/c"})
    assert all(v.survived and not v.cannot_survive for v in alone)
    both = survival_verdicts(snap, policy, keep_plan(snap))
    assert not both[2].survived and both[2].cannot_survive[0].startswith("default/d has 2 masters")


def test_headroom_says_whether_the_grown_cluster_could_survive() -> None:
    snap = snapshot(NODES, _cluster({0: ("a1", "b1"), 1: ("b2", "c1"), 2: ("c2", "a2")}))
    notes = survival_after(snap, Policy(), "default/c", 1, 2)
    assert notes[2] == (
        "with 4 shards in all, no placement survives losing a zone: default/c has 4 masters over "
        "3 zones: some zone holds 2 of them, and the 2 left are no majority; 5 or more shards "
        "would survive (or 3), and so would 4 zones"
    )
    assert survival_after(snap, Policy(), "default/c", 2, 2)[2] == (
        "with 5 shards in all, default/c can survive losing a zone (3 zones)"
    )


def test_a_cluster_with_no_shard_is_not_judged_and_no_count_goes_negative() -> None:
    """Headroom with nothing fitting and nothing running: no masters to keep is neither a
    loss ("losing one leaves -1 of 0") nor survival; no domain at all is not "one zone"."""
    notes = survival_after(snapshot(NODES, []), Policy(), "default/new", 0, 2)
    assert notes == ["not judged: default/new would have no shard (none runs and none is added)"]
    assert cannot_survive("r/s", 3, {str(s): 2 for s in range(3)}, 0, "zone") == (
        "r/s: no zone holds its pods or accepts new ones"
    )


def test_table_json_html_and_map_carry_the_same_verdict_first() -> None:
    """audit of four shards over three zones: the verdict leads the table, and the page, the
    map and the document say the same, the impossibility and what would survive included."""
    from html import unescape

    from click.testing import CliRunner

    from models.plan import LevelVerdict
    from placer.cli import main
    from placer.output.render import survival_lines

    example = "placer/examples/four-shards.yaml"
    runner = CliRunner()
    table = runner.invoke(main, ["audit", "-f", example]).stdout.splitlines()
    document = json.loads(runner.invoke(main, ["audit", "-f", example, "-o", "json"]).stdout)
    verdicts = [LevelVerdict.model_validate(v) for v in document["survival"]]
    lines = survival_lines(verdicts)
    assert table[: len(lines)] == lines
    assert lines[2].startswith("survives losing one zone: NO (soft finding): zone zone-a takes")
    assert "5 or more shards would survive (or 3), and so would 4 zones" in lines[3]
    page = unescape(runner.invoke(main, ["audit", "-f", example, "-o", "html"]).stdout)
    picture = runner.invoke(main, ["audit", "-f", example, "-o", "map"]).stdout
    for line in lines:
        assert f"<div>{line}</div>" in page
        assert line in picture.splitlines()


@pytest.mark.parametrize(
    ("running", "pending", "survive"),
    [
        ({0: ("a1", "b1"), 1: ("b2", "c1")}, 1, "none"),  # the third master goes to c: survives
        ({0: ("a1", "b1"), 1: ("a2", "c1")}, 1, "none"),  # a holds 2 of 3 masters whatever
        ({0: ("a1", "a2")}, 2, "none"),  # shard 0 lives in zone a alone
        ({0: ("a1", "b1"), 1: ("b2", "c1")}, 2, "zone"),  # 4 masters over 3 zones: none survives
        ({}, 3, "zone"),
    ],
)
def test_a_solved_plans_verdict_from_its_violations_is_the_counted_one(
    running: dict[int, tuple[str, str]], pending: int, survive: str
) -> None:
    """The binder's shortcut (``judged``): a CP-SAT plan carries the checker's violations, and
    a level with no survive violation takes nothing; the verdict is the one counted domain by
    domain, whether the batch survives or not."""
    from solver.solve import solve

    policy = Policy.model_validate({"rules": {"survive": survive, "maxMastersPerNode": 2}})
    pods = _cluster(running)
    for i in range(pending):
        shard = len(running) + i
        pods += [redis_pod(f"c-{shard}-{m}", "c", shard, None) for m in range(2)]
    snap = snapshot(NODES, pods, policy)
    plan = solve(snap, policy, "place")
    counted = verdicts_for(snap, policy, plan, {"default/c"})
    assert verdicts_for(snap, policy, plan, {"default/c"}, judged=True) == counted
    assert survival_verdicts(snap, policy, plan, judged=True) == survival_verdicts(
        snap, policy, plan
    )
