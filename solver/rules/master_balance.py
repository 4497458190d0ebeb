"""survival and master-balance (soft): masters spread over domains and over nodes.

survival = weights.survival x the sum over Redis clusters of the most masters in one zone, and
rackSurvival = weights.rackSurvival x the same in one rack: what one failure takes. master-balance =
weights.masterBalance x masters beyond the first on any node. Domain counts are bounded below by
ceil(M / D) once M is known, which CP-SAT would otherwise have to discover.
"""

from collections import Counter, defaultdict
from collections.abc import Callable

from models.cluster import Role
from solver.classes.cpmodel import PlacementModel
from solver.rules.base import Rule


def encode(pm: PlacementModel) -> None:
    encode_survival(pm)
    encode_stacking(pm)


def encode_survival(pm: PlacementModel) -> None:
    weights = pm.problem.policy.weights
    encode_worst_domain(pm, "survival", weights.survival, lambda z, r: z)
    encode_worst_domain(pm, "rackSurvival", weights.rack_survival, lambda z, r: f"{z}/{r}")


def encode_worst_domain(
    pm: PlacementModel, term: str, weight: int, domain: Callable[[str, str], str]
) -> None:
    """Per Redis cluster, the most of its masters in one domain (``domain`` names a node's from
    its zone and rack: a rack lies inside its zone), at ``weight`` each."""
    problem = pm.problem
    if not weight:
        return
    m = pm.model
    classes_in: dict[str, list[int]] = defaultdict(list)
    for cls in problem.classes:
        classes_in[domain(cls.zone, cls.rack)].append(cls.index)
    clusters: dict[str, list[str]] = defaultdict(list)
    for shard in problem.shards.values():
        clusters[shard.cluster].append(shard.key)
    for cluster, keys in sorted(clusters.items()):
        shards = [problem.shards[k] for k in keys]
        groups = [g for s in shards for g in pm.shard_groups(s) if Role.MASTER in g.roles]
        fixed = Counter(
            domain(s.fixed_master[1].zone or "", s.fixed_master[1].rack)
            for s in shards
            if s.fixed_master and s.fixed_master[1] is not None
        )
        if not groups:
            pm.add_constant(term, weight * max(fixed.values(), default=0))
            continue
        most = m.new_int_var(0, len(shards), f"mostMasters[{cluster},{term}]")
        for name, classes in classes_in.items():
            inside = fixed[name] + sum(
                (v for g in groups for v in pm.group_vars(g, classes, Role.MASTER)), 0
            )
            m.add(most >= inside)
        total = sum(fixed.values()) + sum(
            (v for g in groups for v in pm.group_vars(g, role=Role.MASTER)), 0
        )
        # The fullest domain holds at least the average.
        m.add(len(set(classes_in) | set(fixed)) * most >= total)
        for name, count in fixed.items():
            if name not in classes_in:
                m.add(most >= count)
        pm.add_cost(term, weight, most)


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
