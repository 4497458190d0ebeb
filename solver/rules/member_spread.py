"""member-spread (soft): a Redis cluster's members spread over zones.

memberSpread = weights.memberSpread x the sum over Redis clusters of the most members in one
zone: what one zone failure takes of each. Masters move by failover alone only among a shard's
members, so where the members lie bounds where the masters can be put back after a rollout, a
drain or a zone's return. Placing one returning pod at a time, survival (masters only) does not
see a replica's zone; this term sends it back to the zone it left. The fullest zone holds at
least the average, which CP-SAT would otherwise have to discover.
"""

from collections import Counter, defaultdict

from solver.classes.cpmodel import PlacementModel
from solver.rules.base import Rule

TERM = "memberSpread"


def encode(pm: PlacementModel) -> None:
    problem = pm.problem
    weight = problem.policy.weights.member_spread
    if not weight:
        return
    m = pm.model
    zones = pm.domain_classes["zone"]
    clusters: dict[str, list[str]] = defaultdict(list)
    for shard in problem.shards.values():
        clusters[shard.cluster].append(shard.key)
    for cluster, keys in sorted(clusters.items()):
        shards = [problem.shards[k] for k in keys]
        groups = [g for s in shards for g in pm.shard_groups(s)]
        fixed = Counter(node.zone for s in shards for _, node in s.fixed if node is not None)
        if not groups:
            pm.add_constant(TERM, weight * max(fixed.values(), default=0))
            continue
        total = sum(fixed.values()) + sum((v for g in groups for v in pm.group_vars(g)), 0)
        upper = sum(fixed.values()) + sum(g.size for g in groups)
        most = m.new_int_var(0, upper, f"mostMembers[{cluster}]")
        for zone, classes in zones.items():
            inside = fixed[zone] + sum((v for g in groups for v in pm.group_vars(g, classes)), 0)
            m.add(most >= inside)
        for zone, count in fixed.items():
            if zone not in zones:
                m.add(most >= count)
        m.add(len(set(zones) | set(fixed)) * most >= total)
        pm.add_cost(TERM, weight, most)


def _no_hard_violations(*_: object) -> list:
    return []


RULE = Rule(
    name="member-spread",
    kind="soft",
    doc="A Redis cluster's members spread evenly over zones (weights.memberSpread).",
    encode=encode,
    check=_no_hard_violations,
)
