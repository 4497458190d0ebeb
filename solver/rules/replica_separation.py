"""replica-separation (per level): a replica should not share a rack / zone with its own master.

``required`` forbids it, ``preferred`` costs the level's weight per replica that does, ``ignore``
does nothing. With the master already running, the cost is linear in the replica counts; with the
master still to place, a per-domain penalty p >= R - K(1 - M) links them.
"""

from collections import Counter

from models.cluster import Role
from models.policy import Level
from solver.classes.cpmodel import RELAXED_WEIGHT, PlacementModel
from solver.classes.problem import Shard
from solver.rules.base import Rule, violations_of


def _domains_touched(pm: PlacementModel, shard: Shard, level: Level) -> set[str]:
    return {
        pm.problem.domain_of_class(pm.class_obj(c), level)
        for g in pm.shard_groups(shard)
        for c in g.candidates
    }


def encode_level(pm: PlacementModel, level: Level) -> None:
    strength = pm.strength(level)
    if strength == "ignore":
        return
    weight = (
        RELAXED_WEIGHT
        if level in pm.strengths_override
        else pm.problem.policy.weights.separation(level)
    )
    m = pm.model
    for shard in pm.problem.shards.values():
        groups = pm.shard_groups(shard)
        fixed_master = shard.fixed_master
        master_domain = fixed_master[1].domain(level) if fixed_master and fixed_master[1] else None
        if not groups:
            # A running shard with nothing to place only adds its current cost; most shards of a
            # large running cluster are this, so no per-domain counting for them.
            if strength == "preferred" and master_domain is not None:
                same = sum(
                    1
                    for member, node in shard.fixed
                    if node is not None
                    and member.role is Role.REPLICA
                    and node.domain(level) == master_domain
                )
                pm.add_constant(level, weight * same)
            continue
        fixed_replicas = Counter(
            node.domain(level)
            for member, node in shard.fixed
            if node is not None and member.role is Role.REPLICA
        )
        if strength == "preferred" and master_domain is not None:
            pm.add_constant(level, weight * fixed_replicas[master_domain])
        replica_groups = [g for g in groups if Role.REPLICA in g.roles]
        master_groups = [g for g in groups if Role.MASTER in g.roles]
        if not replica_groups and not master_groups:
            continue
        k = sum(g.size for g in replica_groups)
        for domain in sorted(_domains_touched(pm, shard, level)):
            classes = pm.classes_of(level, domain)
            replicas = sum(
                (v for g in replica_groups for v in pm.group_vars(g, classes, Role.REPLICA)), 0
            )
            if fixed_master is not None:
                if domain != master_domain or not replica_groups:
                    continue
                if strength == "required":
                    ct = m.add(replicas == 0)
                    pm.require(ct, f"replica-separation:{level}", f"shard {shard.key}")
                else:
                    pm.add_cost(level, weight, replicas)
                continue
            masters = sum(
                (v for g in master_groups for v in pm.group_vars(g, classes, Role.MASTER)), 0
            )
            if not master_groups:
                continue
            if strength == "required":
                if k:
                    ct = m.add(k * masters + replicas <= k)
                    pm.require(ct, f"replica-separation:{level}", f"shard {shard.key}")
                if fixed_replicas[domain]:
                    ct = m.add(masters == 0)
                    pm.require(ct, f"replica-separation:{level}", f"shard {shard.key}")
                continue
            big = k + fixed_replicas[domain]
            if big == 0:
                continue
            penalty = m.new_int_var(0, big, f"sep[{level},{shard.key},{domain}]")
            m.add(penalty >= replicas + fixed_replicas[domain] - big * (1 - masters))
            pm.add_cost(level, weight, penalty)


def encode_rack(pm: PlacementModel) -> None:
    encode_level(pm, "rack")


def encode_zone(pm: PlacementModel) -> None:
    encode_level(pm, "zone")


def _check(level: Level) -> Rule:
    base = violations_of("replica-separation")

    def check(snapshot, policy, plan):
        return [v for v in base(snapshot, policy, plan) if level in v.message]

    return Rule(
        name=f"replica-separation:{level}",
        kind="per-level",
        doc=f"A replica does not share a {level} with its own master (required, preferred or ignore).",
        encode=encode_rack if level == "rack" else encode_zone,
        check=check,
    )


RACK = _check("rack")
ZONE = _check("zone")
