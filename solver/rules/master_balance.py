"""survival and master-balance (soft): masters spread over domains and over nodes.

survival = weights.survival x the sum over Redis clusters of the most masters in one domain of
the survive level (zone when survive is none): what one failure takes. master-balance =
weights.masterBalance x masters beyond the first on any node. Domain counts are bounded below by
ceil(M / D) once M is known, which CP-SAT would otherwise have to discover.
"""

from collections import Counter, defaultdict

from models.cluster import Role
from solver.classes.cpmodel import PlacementModel
from solver.rules.base import Rule


def encode(pm: PlacementModel) -> None:
    encode_survival(pm)
    encode_stacking(pm)


def encode_survival(pm: PlacementModel) -> None:
    problem = pm.problem
    weight = problem.policy.weights.survival
    if not weight:
        return
    survive = problem.policy.rules.survive
    level = "zone" if survive == "none" else survive
    m = pm.model
    zones = sorted(pm.domain_classes[level])
    clusters: dict[str, list[str]] = defaultdict(list)
    for shard in problem.shards.values():
        clusters[shard.cluster].append(shard.key)
    for cluster, keys in sorted(clusters.items()):
        shards = [problem.shards[k] for k in keys]
        groups = [g for s in shards for g in pm.shard_groups(s) if Role.MASTER in g.roles]
        fixed = Counter(
            s.fixed_master[1].domain(level)
            for s in shards
            if s.fixed_master and s.fixed_master[1] is not None
        )
        if not groups:
            pm.add_constant("survival", weight * max(fixed.values(), default=0))
            continue
        most = m.new_int_var(0, len(shards), f"mostMasters[{cluster}]")
        if level == "host":
            # A class of several nodes is several hosts: only what already runs is certain.
            m.add(most >= max(fixed.values(), default=0))
            pm.add_cost("survival", weight, most)
            continue
        for zone in zones:
            classes = pm.classes_of(level, zone)
            in_zone = fixed[zone] + sum(
                (v for g in groups for v in pm.group_vars(g, classes, Role.MASTER)), 0
            )
            m.add(most >= in_zone)
        total = sum(fixed.values()) + sum(
            (v for g in groups for v in pm.group_vars(g, role=Role.MASTER)), 0
        )
        m.add(
            len(set(zones) | set(fixed)) * most >= total
        )  # the fullest zone holds at least the average
        for zone, count in fixed.items():
            if zone not in zones:
                m.add(most >= count)
        pm.add_cost("survival", weight, most)


def encode_stacking(pm: PlacementModel) -> None:
    """Masters beyond one per node."""
    problem = pm.problem
    weight = problem.policy.weights.master_balance
    if not weight:
        return
    m = pm.model
    fixed_masters = Counter(
        n.name
        for member, n in problem.fixed_members
        if n is not None and member.role is Role.MASTER
    )
    for name, count in fixed_masters.items():
        if name not in problem.node_class:
            pm.add_constant("masterBalance", weight * max(0, count - 1))
    for cls in problem.classes:
        masters = pm.class_count(cls.index, Role.MASTER)
        base = cls.size * cls.fixed_masters
        if isinstance(masters, int):
            pm.add_constant("masterBalance", weight * cls.size * max(0, cls.fixed_masters - 1))
            continue
        excess = m.new_int_var(
            0, base + len(pm.by_class[cls.index]) * cls.size, f"excessMasters[{cls.index}]"
        )
        m.add(excess >= base + masters - cls.size)
        m.add(excess >= cls.size * max(0, cls.fixed_masters - 1))
        pm.add_cost("masterBalance", weight, excess)


def _no_hard_violations(*_: object) -> list:
    return []


RULE = Rule(
    name="master-balance",
    kind="soft",
    doc="Masters spread evenly over zones and nodes (weights.masterBalance).",
    encode=encode,
    check=_no_hard_violations,
)
