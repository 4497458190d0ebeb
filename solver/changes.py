"""The change list of a rebalance plan, and the placement it leaves.

``rebalance`` and ``plan --mode rebalance`` both go through here, so they agree: the same
failovers (including the one that goes before a running master is moved) and the same moves,
judged on the placement the changes actually leave, within any ``--max-*`` caps.
"""

from models.cluster import Role
from models.plan import Assignment, Failover, Plan, Violation
from models.policy import Policy
from models.snapshot import Snapshot
from solver.check import assess, audit

Change = dict[str, str]


def change_list(plan: Plan, snapshot: Snapshot | None = None) -> list[Change]:
    """The changes, cheapest first: failovers (no data moves), then pod moves.

    A running master is never evicted as it stands: evicting it stops writes to its slots until
    Redis notices and promotes a replica. When the plan moves one (with ``snapshot``, which says
    who is master now), a failover to a replica that stays put comes first, and the move carries
    ``"afterFailover"`` so that a cut in the change list never keeps the move without it.
    """
    failovers = [
        {"kind": "failover", "shard": f"{f.cluster}/{f.shard}", "from": f.from_, "to": f.to}
        for f in plan.failovers
    ]
    moves_planned = [a for a in plan.assignments if a.action == "move"]
    moving = {a.pod for a in moves_planned}
    members = {m.key: m for m in snapshot.members} if snapshot is not None else {}
    failing_over = {c["from"] for c in failovers}
    moves: list[Change] = []
    for a in moves_planned:
        move = {
            "kind": "move",
            "shard": f"{a.cluster}/{a.shard}",
            "pod": a.pod,
            "from": a.from_node or "",
            "to": a.node or "",
        }
        member = members.get(a.pod)
        if member is not None and member.role is Role.MASTER and not member.pod.pending:
            if a.pod not in failing_over:
                stay = _staying_replica(snapshot, member.shard_key, moving)  # type: ignore[arg-type]
                if stay is not None:
                    failovers.append(
                        {"kind": "failover", "shard": move["shard"], "from": a.pod, "to": stay}
                    )
                    failing_over.add(a.pod)
            if a.pod in failing_over:
                move["afterFailover"] = a.pod
        moves.append(move)
    return failovers + moves


def _staying_replica(snapshot: Snapshot, shard_key: str, moving: set[str]) -> str | None:
    """A running replica of the shard that this plan leaves where it is: the one to promote."""
    candidates = sorted(
        m.key
        for m in snapshot.shards.get(shard_key, [])
        if m.role is Role.REPLICA
        and not m.pod.pending
        and not m.pod.deleting
        and m.key not in moving
    )
    return candidates[0] if candidates else None


def limit_changes(
    changes: list[Change], max_failovers: int | None, max_moves: int | None
) -> list[Change]:
    """The changes one run makes: at most ``max_failovers`` failovers and ``max_moves`` moves,
    and never a move whose failover was cut."""
    failovers = [c for c in changes if c["kind"] == "failover"][:max_failovers]
    kept = {c["from"] for c in failovers}
    moves = [
        c for c in changes if c["kind"] == "move" and c.get("afterFailover", "") in kept | {""}
    ][:max_moves]
    return failovers + moves


def plan_after(snapshot: Snapshot, plan: Plan, changes: list[Change]) -> Plan:
    """``plan`` reduced to what ``changes`` do: running members move and change role only as the
    changes say; pending members keep the plan's placement (the binder places them)."""
    moves = {c["pod"]: c for c in changes if c["kind"] == "move"}
    failovers = [c for c in changes if c["kind"] == "failover"]
    promoted = {c["to"] for c in failovers}
    demoted = {c["from"] for c in failovers}
    planned = {a.pod: a for a in plan.assignments}
    members = {m.key: m for m in snapshot.members}
    assignments = []
    for member in snapshot.members:
        key = member.key
        if member.pod.pending:
            if key in planned:
                assignments.append(planned[key])
            continue
        if key in promoted:
            role = Role.MASTER
        elif key in demoted:
            role = Role.REPLICA
        else:
            role = member.role or Role.REPLICA
        move = moves.get(key)
        assignments.append(
            Assignment(
                pod=key,
                node=move["to"] if move else member.pod.node_name,
                role=role.value,
                cluster=member.cluster,
                shard=member.shard,
                action="move" if move else "keep",
                from_node=move["from"] if move else None,
            )
        )
    return plan.model_copy(
        update={
            "assignments": assignments,
            "failovers": [
                Failover(
                    cluster=members[c["from"]].cluster,
                    shard=members[c["from"]].shard,
                    **{"from": c["from"]},
                    to=c["to"],
                )
                for c in failovers
            ],
        }
    )


def after_changes(
    snapshot: Snapshot, policy: Policy, plan: Plan, changes: list[Change]
) -> list[Violation]:
    """The audit of the placement the changes leave: what is still wrong after this run."""
    return audit(snapshot, policy, plan_after(snapshot, plan, changes))


def guarded_plan(snapshot: Snapshot, policy: Policy, plan: Plan) -> Plan:
    """A rebalance plan as ``rebalance`` carries it out: with the failover that precedes each
    moved master, judged (violations, objective, worst failure) on what that leaves."""
    changes = change_list(plan, snapshot)
    if sum(c["kind"] == "failover" for c in changes) == len(plan.failovers):
        return plan
    carried = plan_after(snapshot, plan, changes)
    verdict = assess(snapshot, policy, carried)
    objective = float(verdict.terms.get("total", 0.0))
    bound = min(plan.bound, objective)
    status = plan.status
    if status == "OPTIMAL" and objective > bound:
        status = "FEASIBLE"  # the solver's optimum moved a master as it stands; this does not
    return carried.model_copy(
        update={
            "status": status,
            "objective": objective,
            "bound": bound,
            "gap": (objective - bound) / objective if objective > 0 else 0.0,
            "violations": verdict.violations,
            "worst_domain_loss": verdict.worst_domain_loss,
            "objective_terms": {k: v for k, v in verdict.terms.items() if k != "total"},
        }
    )
