"""shard-spread (hard): two members of one shard never share a host.

Per class of k single-host nodes, at most k members of a shard minus the nodes that already hold
one; classes that share one host (several Node objects on a machine) are capped per host.
"""

from collections import Counter, defaultdict

from solver.classes.cpmodel import PlacementModel
from solver.rules.base import Rule, violations_of


def encode(pm: PlacementModel) -> None:
    problem = pm.problem
    for shard in problem.shards.values():
        groups = pm.shard_groups(shard)
        if not groups:
            continue
        occupied_nodes = {node.name for _, node in shard.fixed if node is not None}
        occupied_hosts = Counter(node.host for _, node in shard.fixed if node is not None)
        potential: dict[int, int] = defaultdict(int)
        for g in groups:
            for c in g.candidates:
                potential[c] += g.size
        shared_hosts: dict[str, list[int]] = defaultdict(list)
        for c, most in potential.items():
            cls = pm.class_obj(c)
            if cls.host is not None:
                shared_hosts[cls.host].append(c)
                continue
            room = max(0, cls.size - sum(1 for n in cls.nodes if n.name in occupied_nodes))
            if most > room:
                ct = pm.model.add(pm.shard_count(shard, [c]) <= room)
                pm.require(ct, "shard-spread", f"shard {shard.key}")
        for host, classes in shared_hosts.items():
            room = max(0, 1 - occupied_hosts[host])
            if sum(potential[c] for c in classes) > room:
                ct = pm.model.add(pm.shard_count(shard, classes) <= room)
                pm.require(ct, "shard-spread", f"shard {shard.key}")


RULE = Rule(
    name="shard-spread",
    kind="hard",
    doc="Two members of one shard never share a host.",
    encode=encode,
    check=violations_of("shard-spread"),
)
