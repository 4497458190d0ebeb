"""survive (hard, opt-in): losing any one domain at the chosen level keeps every shard alive and
strictly more than half of each Redis cluster's masters.

Per domain D: members of s in D <= members of s - 1, and 2 * masters of k in D <= masters of k - 1.
What already runs is never made worse: when the running pods alone already break a bound, the
bound becomes "no worse than now" instead of making every placement infeasible.
"""

from collections import Counter, defaultdict

from models.cluster import Role
from solver.classes.cpmodel import LinearExpr, PlacementModel
from solver.rules.base import Rule, violations_of


def encode(pm: PlacementModel) -> None:
    level = pm.problem.policy.rules.survive
    if level == "none":
        return
    problem = pm.problem
    m = pm.model
    domains = sorted(pm.domain_classes[level])

    # Shards: not all members inside one domain.
    for shard in problem.shards.values():
        groups = pm.shard_groups(shard)
        if not groups:
            continue
        alive = [node for _, node in shard.fixed if node is not None]
        fixed_in = Counter(node.domain(level) for node in alive)
        total: LinearExpr = len(alive) + sum((v for g in groups for v in pm.group_vars(g)), 0)
        active = _active_literal(pm, shard.key, len(alive), total)
        touched = {
            problem.domain_of_class(pm.class_obj(c), level) for g in groups for c in g.candidates
        }
        for domain in sorted(touched | {d for d in fixed_in if d is not None}):
            inside = fixed_in[domain] + pm.shard_count(shard, pm.classes_of(level, domain))
            allowed = max(-1, fixed_in[domain] - len(alive)) if alive else -1
            ct = m.add(inside - total <= allowed)
            if active is not None:
                ct.only_enforce_if(active)
            pm.require(ct, f"survive:{level}", f"shard {shard.key}")

    # Redis clusters: a strict majority of masters outside any one domain.
    clusters: dict[str, list[str]] = defaultdict(list)
    for shard in problem.shards.values():
        clusters[shard.cluster].append(shard.key)
    for cluster, shard_keys in sorted(clusters.items()):
        shards = [problem.shards[k] for k in shard_keys]
        master_groups = [g for s in shards for g in pm.shard_groups(s) if Role.MASTER in g.roles]
        if not master_groups:
            continue
        fixed_masters = [
            s.fixed_master[1] for s in shards if s.fixed_master and s.fixed_master[1] is not None
        ]
        fixed_in = Counter(node.domain(level) for node in fixed_masters)
        total_masters: LinearExpr = len(fixed_masters) + sum(
            (v for g in master_groups for v in pm.group_vars(g, role=Role.MASTER)), 0
        )
        active = _active_literal(pm, cluster, len(fixed_masters), total_masters)
        for domain in sorted(set(domains) | {d for d in fixed_in if d is not None}):
            classes = pm.classes_of(level, domain)
            inside = fixed_in[domain] + sum(
                (v for g in master_groups for v in pm.group_vars(g, classes, Role.MASTER)), 0
            )
            allowed = max(-1, 2 * fixed_in[domain] - len(fixed_masters)) if fixed_masters else -1
            ct = m.add(2 * inside - total_masters <= allowed)
            if active is not None:
                ct.only_enforce_if(active)
            pm.require(ct, f"survive:{level}", f"Redis cluster {cluster}")


def _active_literal(pm: PlacementModel, name: str, fixed: int, total: LinearExpr) -> object | None:
    """With nothing running yet, the bound holds only once something is placed."""
    if fixed:
        return None
    active = pm.model.new_bool_var(f"active[{name}]")
    pm.model.add(total >= 1).only_enforce_if(active)
    pm.model.add(total == 0).only_enforce_if(active.negated())
    return active


RULE = Rule(
    name="survive",
    kind="opt-in",
    doc="Losing any one domain at rules.survive keeps every shard and a strict majority of masters.",
    encode=encode,
    check=violations_of("survive"),
)
