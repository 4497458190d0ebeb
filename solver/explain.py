"""Why pods cannot be placed, in words, one reason per shard.

In order, the first that holds: the shard's roles contradict each other; it needs more distinct
hosts than accept its pods; survive asks for what its Redis cluster cannot have (three masters
at least, in three domains); a pod no node accepts at all gets kube-scheduler's filter tally
("0/12 nodes are available: 4 node not Ready, 8 insufficient memory"); shards that fit alone but
not together get the rules CP-SAT finds in conflict, from an unsatisfiable core over per-rule
assumption literals.
"""

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable

from models.cluster import Member, Node, Pod, Role
from models.policy import Policy
from models.resources import Resources
from models.snapshot import Snapshot
from models.words import plural, verb
from solver.classes.cpmodel import PlacementModel, build_variables
from solver.classes.problem import Group, Problem, build_problem, constraint_signature
from solver.cpsat import cp_model
from solver.predicates import blocking_reason, node_accepts_new_pods, nodes_available
from solver.volumes import held_reason

SHORT = "not placed: "
"""How the short reason of a shard left out for room begins (``GENERIC`` and the proven one)."""
GENERIC = (
    f"{SHORT}no room left that keeps every hard rule once the other shards of the batch are placed"
)
EXPLAIN_LIMIT = 20_000
"""Class-model size (candidate classes over groups) up to which a conflict is explained."""
BUILD_SECONDS = 150e-6
"""Seconds to build the conflict model, per candidate class of a group (measured on this
2-core machine, loaded: 2.7 s for 19,000): it is built only when that leaves time to solve it."""


def filter_summary(problem: Problem, member: Member) -> str:
    """The kube-scheduler style tally of why each node refuses this pod."""
    reasons: Counter[str] = Counter()
    load = problem.pod_load
    for node in problem.snapshot.nodes:
        reason = blocking_reason(member.pod, node)
        if reason is None:
            free = node.allocatable - load.get(node.name, Resources())
            req = member.pod.requests
            if req.cpu > free.cpu:
                reason = "insufficient cpu"
            elif req.memory > free.memory:
                reason = "insufficient memory"
            elif req.pods > free.pods:
                reason = "too many pods"
            else:
                reason = "holds another member of the shard or no room left"
        reasons[reason] += 1
    total = len(problem.snapshot.nodes)
    return nodes_available(reasons, total) if reasons else "the cluster has no nodes"


def explain_conflict(
    problem: Problem, shards: list[str], encode_rules: object, time_limit: float
) -> list[str]:
    """Solve with every shard forced in, each hard rule behind an assumption, and read the core."""
    pm = PlacementModel(problem, explain=True)
    build_variables(pm)
    for encode in encode_rules:  # type: ignore[attr-defined]
        encode(pm)
    assumptions: list[cp_model.IntVar] = []
    described: dict[int, str] = {}
    for key in shards:
        lit = pm.placed.get(key)
        if lit is not None:
            assumptions.append(lit)
            described[lit.index] = f"place shard {key}"
    for guard in pm.guards.values():
        assumptions.append(guard.literal)
        described[guard.literal.index] = f"{guard.rule} ({guard.subject})"
    if not assumptions:
        return []
    pm.model.add_assumptions(assumptions)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    status = solver.solve(pm.model)
    if status != cp_model.INFEASIBLE:
        return [
            "the shards fit one at a time but not all together within the time given; "
            "placing them would leave others without room (try a longer --time-limit)"
        ]
    core = [
        described[i] for i in solver.sufficient_assumptions_for_infeasibility() if i in described
    ]
    wanted = [c for c in core if c.startswith("place shard")]
    rules = sorted({c for c in core if not c.startswith("place shard")})
    if not rules:
        return [f"{', '.join(w[len('place shard ') :] for w in wanted)}: cannot all be placed"]
    who = ", ".join(w[len("place shard ") :] for w in wanted) or "the pending shards"
    return [f"{who}: cannot be placed together; these rules conflict: " + "; ".join(rules)]


def _masters_possible(snapshot: Snapshot) -> Counter[str]:
    """Per Redis cluster: how many masters it can have, one per shard that has or gets one."""
    out: Counter[str] = Counter()
    for members in snapshot.shards.values():
        running = any(m.role is Role.MASTER and not m.pod.pending for m in members)
        pending = any(m.pod.pending and m.role in (Role.MASTER, None) for m in members)
        if running or pending:
            out[members[0].cluster] += 1
    return out


class _Accepting:
    """Per kind of pod (``constraint_signature``): the nodes whose filter it passes, worked out
    once for every shard of that kind rather than once per shard (a full cluster leaves
    thousands of shards out, each asking of every node); and the masters each Redis cluster
    can have, worked out once."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._nodes: dict[tuple[object, ...], tuple[list[Node], frozenset[str | None]]] = {}
        self._masters: Counter[str] | None = None
        self._domains: dict[tuple[tuple[object, ...], str], int] = {}

    def domains(self, pod: Pod, level: str) -> int:
        """The domains of ``level`` holding a node that accepts the pod and new pods at all:
        once per kind, as the nodes (2,700 shards left out of 15,000 nodes asked 30 s of it)."""
        key = (constraint_signature(pod), level)
        found = self._domains.get(key)
        if found is None:
            nodes, _ = self.nodes(pod)
            found = self._domains[key] = len(
                {n.domain(level) for n in nodes if node_accepts_new_pods(n)}
            )
        return found

    def nodes(self, pod: Pod) -> tuple[list[Node], frozenset[str | None]]:
        """The nodes that accept the pod, and their hosts."""
        kind = constraint_signature(pod)
        found = self._nodes.get(kind)
        if found is None:
            nodes = [n for n in self.snapshot.nodes if blocking_reason(pod, n) is None]
            found = self._nodes[kind] = (nodes, frozenset(n.host for n in nodes))
        return found

    def masters(self, cluster: str) -> int:
        if self._masters is None:
            self._masters = _masters_possible(self.snapshot)
        return self._masters[cluster]


def _structural(
    snapshot: Snapshot, policy: Policy, shard: str, accepting: _Accepting
) -> str | None:
    """A reason no placement of the batch could overcome, or None."""
    members = snapshot.shards[shard]
    pending = [m for m in members if m.pod.pending and not m.pod.deleting]
    nodes = snapshot.node_by_name
    fixed_hosts = {nodes[m.pod.node_name].host for m in members if m.pod.node_name in nodes}
    probe = pending[0]
    _, hosts = accepting.nodes(probe.pod)
    size = len(fixed_hosts) + len(pending)
    held = len(hosts) + len(fixed_hosts - hosts)
    if hosts and size > held:  # no host at all: the filter tally says why
        refused = Counter(
            r for n in snapshot.nodes if (r := blocking_reason(probe.pod, n)) is not None
        )
        others = ", ".join(f"{count} {why}" for why, count in refused.most_common(3))
        return (
            f"shard {shard} has {size} members and needs {size} distinct hosts (two members "
            f"of a shard never share one); {plural(held, 'host')} "
            f"{verb(held, 'accepts', 'accept')} its pods"
            + (f" (the other nodes: {others})" if others else "")
        )
    level = policy.rules.survive
    if level == "none":
        return None
    if size < 2:
        return (
            f"shard {shard} has 1 member: survive: {level} needs a member left after losing "
            f"any one {level}, so two members at least"
        )
    cluster = members[0].cluster
    masters = accepting.masters(cluster)
    if masters < 3:
        return (
            f"Redis cluster {cluster} has {plural(masters, 'master')} at most: "
            f"{plural(masters, 'master')} can never "
            f"keep a majority after losing one; survive: {level} needs at least 3 masters "
            "(Redis Cluster needs 3 to fail over on its own)"
        )
    domains = accepting.domains(probe.pod, level)
    if domains < 3:
        return (
            f"survive: {level} needs the masters of {cluster} in at least 3 {level}s (losing "
            f"one must leave a majority); {plural(domains, level)} "
            f"{verb(domains, 'accepts', 'accept')} its pods"
        )
    return None


def _no_master_room(problem: Problem, shard: str) -> str | None:
    """Why a shard without a master cannot have one: every node with room for its pods holds
    ``rules.maxMastersPerNode`` masters already. Running masters stay where they are, so no
    placement of the batch changes that (a full cluster's every new shard: said without the
    conflict model, which would take seconds to find the same)."""
    entry = problem.shards.get(shard)
    if entry is None or entry.fixed_master is not None:
        return None
    groups = [problem.groups[i] for i in entry.groups]
    classes = {c for g in groups if Role.MASTER in g.roles for c in g.candidates}
    if not classes:
        return None  # no node takes its pods at all, or no member may be master: said elsewhere
    cap = problem.policy.rules.max_masters_per_node
    if any(problem.classes[c].fixed_masters < cap for c in classes):
        return None
    nodes = sum(problem.classes[c].size for c in classes)
    return (
        f"shard {shard} needs a master, and none of the {nodes} node(s) with room for its pods "
        f"can take one: each holds {cap} already (rules.maxMastersPerNode is {cap}; running "
        "masters stay where they are)"
    )


def unplaced_reasons(
    snapshot: Snapshot,
    policy: Policy,
    missing: Iterable[Member],
    unplaceable: dict[str, str],
    encode_rules: list[Callable[..., None]],
    deadline: float | None,
    proven_most: int | None = None,
    explain: Collection[str] | None = None,
    masters_stay: bool = True,
) -> tuple[dict[str, str], list[str]]:
    """(pod key -> why it is not placed, the conflict explanation if one was found).

    ``deadline`` None skips the conflict explanation (it solves a model of its own).
    ``proven_most``: the solver proved no plan places more pending pods than this; shards left
    out for room say so where no conflict is explained for them.
    ``explain``: the shards whose conflict with the others is worth that model (None: all);
    when none of the shards in conflict is among them, they get the short reason.
    ``masters_stay``: running masters keep their nodes (place mode), so a shard whose master no
    node with room can take says so; rebalance may move them, and leaves that to the model.
    """
    by_shard: dict[str, list[Member]] = defaultdict(list)
    for member in missing:
        by_shard[member.shard_key].append(member)
    reasons: dict[str, str] = {}
    accepting = _Accepting(snapshot)
    problem: Problem | None = None
    group_of: dict[str, Group] = {}
    conflict: list[str] = []
    for shard, members in sorted(by_shard.items()):
        live = [m for m in members if not m.pod.deleting]
        if not live:
            continue
        if shard in unplaceable:
            reasons[shard] = unplaceable[shard]
            continue
        held = next((f"{m.key}: {r}" for m in live if (r := held_reason(m.pod))), None)
        if held is not None:
            reasons[shard] = held
            continue
        structural = _structural(snapshot, policy, shard, accepting)
        if structural is not None:
            reasons[shard] = structural
            continue
        if problem is None:
            if deadline is not None and time.monotonic() >= deadline:
                conflict.append(shard)  # no time left to build the filter tally: say less
                continue
            problem = build_problem(snapshot, policy, "place", max_variables=None)
            group_of = {m.key: g for g in problem.groups for m in g.members}
        without = next(
            (m for m in live if m.key in group_of and not group_of[m.key].candidates), None
        )
        if without is not None:
            reasons[shard] = f"{without.key}: {filter_summary(problem, without)}"
        elif masters_stay and (full := _no_master_room(problem, shard)) is not None:
            reasons[shard] = full
        else:
            conflict.append(shard)
    explanation: list[str] = []
    wanted = explain is None or any(shard in explain for shard in conflict)
    if conflict and problem is not None and deadline is not None and wanted:
        size = sum(len(g.candidates) for g in problem.groups)
        remaining = deadline - time.monotonic() - BUILD_SECONDS * size
        if size <= EXPLAIN_LIMIT and remaining > 0.2:
            placed = [k for k in problem.shards if k not in conflict and k not in reasons]
            explanation = explain_conflict(
                problem, conflict + placed, encode_rules, min(2.0, remaining - 0.1)
            )
            if explanation and explanation[0].startswith("the shards fit one at a time"):
                explanation = []  # no core within the time: say what is proven instead
    fallback = GENERIC
    if proven_most is not None:
        pending = sum(1 for m in snapshot.pending if not m.pod.deleting)
        fallback = (
            f"{SHORT}no plan places more than {proven_most} of the {pending} pending pods "
            "under every hard rule (proven by the solver), and this shard is among those left out"
        )
        if conflict and not explanation:
            explanation = [fallback]  # only when some shard is in fact left out for room
    for shard in conflict:
        named = [line for line in explanation if _names(line, shard)]
        reasons[shard] = named[0] if named else fallback
    out: dict[str, str] = {}
    for shard, members in by_shard.items():
        for m in members:
            out[m.key] = "pod is being deleted" if m.pod.deleting else reasons.get(shard, GENERIC)
    return out, explanation


def left_out_for_room(reason: str) -> bool:
    """Whether a pod's reason is the short one of a shard left out for room: the one it gets
    when its conflict is not explained."""
    return reason.startswith(SHORT)


def _names(line: str, shard: str) -> bool:
    """Whether an explanation line names the shard (as a whole word, not a prefix of another)."""
    head = line.split(":", 1)[0] if ": " in line else line
    return shard in [part.strip() for part in head.split(",")]
