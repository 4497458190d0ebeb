"""Exhaustive search over tiny instances: the ground truth the solver's optimum is compared to.

Every candidate is judged only by the independent checker (``solver.check``), so the optimum
found here owes nothing to the CP-SAT encoding. Deliberately naive: enumerate, check, keep the
cheapest.
"""

from collections.abc import Iterator, Mapping, Sequence
from itertools import product

from models.cluster import Member, Role
from models.plan import Action, Assignment, Failover, Mode, Plan, Unplaced
from models.policy import Policy
from models.snapshot import Snapshot
from solver.check import check_plan, evaluate_objective

PLACE_LIMIT = (6, 6)
"""(nodes, pending pods) beyond which the place-mode search is refused."""
REBALANCE_LIMIT = (5, 5)
"""(nodes, pods) beyond which the rebalance search is refused."""


def _key(name: str) -> str:
    return name if "/" in name else f"default/{name}"


def plan_for(
    snapshot: Snapshot,
    nodes: Mapping[str, str | None],
    roles: Mapping[str, Role | str] | None = None,
    failovers: Sequence[Failover] = (),
) -> Plan:
    """A plan that lists every member: given nodes/roles win, the rest stay as they are.

    Keys are pod keys (``ns/name``; a bare name means namespace ``default``). Pending members
    get action ``place``, running ones ``keep`` or ``move`` depending on whether their node
    changes; a member with no node is listed as unplaced.
    """
    wanted_nodes = {_key(k): v for k, v in nodes.items()}
    wanted_roles = {_key(k): Role(v) for k, v in (roles or {}).items()}
    assignments = []
    unplaced = []
    for m in snapshot.members:
        current = m.pod.node_name
        node = wanted_nodes.get(m.key, current)
        role = wanted_roles.get(m.key) or m.role or Role.REPLICA
        action: Action = "place" if m.pod.pending else "keep" if node == current else "move"
        assignments.append(
            Assignment(
                pod=m.key,
                node=node,
                role=role.value,
                cluster=m.cluster,
                shard=m.shard,
                action=action,
                from_node=current if action == "move" else None,
            )
        )
        if node is None:
            unplaced.append(Unplaced(pod=m.key, reason="not placed"))
    return Plan(
        status="FEASIBLE", assignments=assignments, unplaced=unplaced, failovers=list(failovers)
    )


def _place_role_choices(snapshot: Snapshot) -> Iterator[dict[str, Role]]:
    """Place mode: in a shard with no labelled master, one role-less pending member becomes master."""
    per_shard: list[list[dict[str, Role]]] = []
    for members in snapshot.shards.values():
        undecided = [m for m in members if m.role is None]
        has_master = any(m.role is Role.MASTER for m in members)
        if has_master or not undecided:
            per_shard.append([{m.key: Role.REPLICA for m in undecided}])
        else:
            per_shard.append(
                [
                    {m.key: Role.MASTER if m is chosen else Role.REPLICA for m in undecided}
                    for chosen in undecided
                ]
            )
    for combo in product(*per_shard):
        merged: dict[str, Role] = {}
        for part in combo:
            merged.update(part)
        yield merged


def _rebalance_role_choices(snapshot: Snapshot) -> Iterator[tuple[dict[str, Role], list[Failover]]]:
    """Rebalance mode: any member of a shard may be its master; leaving a running master is a failover."""
    per_shard: list[list[tuple[dict[str, Role], list[Failover]]]] = []
    for members in snapshot.shards.values():
        current = next((m for m in members if m.role is Role.MASTER and not m.pod.pending), None)
        options = []
        for chosen in members:
            shard_roles = {m.key: Role.MASTER if m is chosen else Role.REPLICA for m in members}
            shard_failovers = []
            if current is not None and chosen is not current:
                shard_failovers.append(
                    Failover(
                        cluster=chosen.cluster, shard=chosen.shard, from_=current.key, to=chosen.key
                    )
                )
            options.append((shard_roles, shard_failovers))
        per_shard.append(options)
    for combo in product(*per_shard):
        roles: dict[str, Role] = {}
        failovers: list[Failover] = []
        for part_roles, part_failovers in combo:
            roles.update(part_roles)
            failovers.extend(part_failovers)
        yield roles, failovers


def _cost_if_feasible(snapshot: Snapshot, policy: Policy, plan: Plan) -> float | None:
    if any(v.severity == "hard" for v in check_plan(snapshot, policy, plan)):
        return None
    return evaluate_objective(snapshot, policy, plan)["total"]


def brute_force_optimum(snapshot: Snapshot, policy: Policy, mode: Mode = "place") -> float | None:
    """The least objective over every plan with all pending pods placed and no hard violation.

    ``place``: running members stay put with their roles; every pending member tries every node,
    and role-less pending members of a masterless shard try each being the master.
    ``rebalance``: every member tries every node (a changed node is a move) and every member of
    each shard tries being its master (leaving a running master is a failover).
    None when nothing is feasible.
    """
    node_names = [n.name for n in snapshot.nodes]
    best: float | None = None
    choices: list[tuple[dict[str, Role], list[Failover]]]
    if mode == "place":
        movable: list[Member] = snapshot.pending
        if len(node_names) > PLACE_LIMIT[0] or len(movable) > PLACE_LIMIT[1]:
            raise ValueError(
                f"too large for brute force: {len(node_names)} nodes, {len(movable)} pods"
            )
        choices = [(roles, []) for roles in _place_role_choices(snapshot)]
    else:
        movable = list(snapshot.members)
        if len(node_names) > REBALANCE_LIMIT[0] or len(movable) > REBALANCE_LIMIT[1]:
            raise ValueError(
                f"too large for brute force: {len(node_names)} nodes, {len(movable)} pods"
            )
        choices = list(_rebalance_role_choices(snapshot))
    for combo in product(node_names, repeat=len(movable)):
        placement = {m.key: node for m, node in zip(movable, combo, strict=True)}
        for roles, failovers in choices:
            plan = plan_for(snapshot, placement, roles, failovers)
            cost = _cost_if_feasible(snapshot, policy, plan)
            if cost is not None and (best is None or cost < best):
                best = cost
    return best
