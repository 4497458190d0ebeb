"""fits (hard): a member goes only where it is allowed and where there is room.

Readiness, taints, nodeSelector and nodeAffinity are decided per class when candidates are built
(solver/problem.py), with where the pod's volumes can be (solver/volumes.py). Here: capacity, and
free local PVs, which pods with an unbound local claim consume one each. For a class of k identical nodes the aggregate room is k times
one node's room, and no node holds more than floor(room / request) members of one size: both are
exact for a single node and valid cuts for larger classes.
"""

from collections import defaultdict
from typing import Any

from solver.classes.cpmodel import PlacementModel
from solver.rules.base import Rule, violations_of
from solver.volumes import local_demand

RESOURCES = ("cpu", "memory", "pods")


def encode(pm: PlacementModel) -> None:
    for c, entries in pm.by_class.items():
        if not entries:
            continue
        cls = pm.class_obj(c)
        free = cls.free
        for r, resource in enumerate(RESOURCES):
            demand = [g.requests[r] * v for g, _, v in entries if g.requests[r]]
            upper = sum(g.requests[r] * min(g.size, cls.size) for g, _, v in entries)
            if demand and upper > cls.size * free[r]:
                ct = pm.model.add(sum(demand, 0) <= cls.size * free[r])
                pm.require(
                    ct, "fits", f"capacity ({resource}) of {cls.size} node(s) in rack {cls.rack}"
                )
        if cls.size > 1:
            by_size: dict[tuple[int, int, int], list[object]] = defaultdict(list)
            for g, _, v in entries:
                by_size[g.requests].append(v)
            for req, vars_ in by_size.items():
                per_node = min(f // q for f, q in zip(free, req, strict=True) if q > 0)
                if len(vars_) > 1 or per_node < cls.size:
                    ct = pm.model.add(sum(vars_, 0) <= cls.size * per_node)
                    pm.require(ct, "fits", f"capacity of {cls.size} node(s) in rack {cls.rack}")
        if cls.volumes or any(g.members[0].pod.volumes for g, _, _ in entries):
            _encode_volumes(pm, cls.size, dict(cls.volumes), cls.rack, entries)


def _encode_volumes(
    pm: PlacementModel, size: int, free: dict[str, int], rack: str, entries: list[Any]
) -> None:
    """Pods with an unbound local claim take one free PV of its class each (solver/volumes.py)."""
    demand: dict[str, list[Any]] = defaultdict(list)
    for g, _, v in entries:
        for pool, k in local_demand(g.members[0].pod).items():
            demand[pool].append(k * v)
    for pool, terms in demand.items():
        ct = pm.model.add(sum(terms, 0) <= size * max(0, free.get(pool, 0)))
        pm.require(ct, "fits", f"free pvs of storage class {pool} on {size} node(s) in rack {rack}")


RULE = Rule(
    name="fits",
    kind="hard",
    doc="Ready, schedulable node; taints tolerated; nodeSelector and affinity match; cpu, memory and pod room.",
    encode=encode,
    check=violations_of("fits"),
)
