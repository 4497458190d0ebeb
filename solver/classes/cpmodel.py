"""The CP-SAT model shared by every rule: decision variables, counting helpers, costs and guards.

Decision: ``n[g][c][role]`` = how many members of group g go to node class c with that role.
Rules (solver/rules/) add constraints and costs through this object, never by reaching into
each other's variables.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from models.cluster import Role
from models.policy import Level
from solver.classes.problem import Group, NodeClass, Problem, Shard
from solver.cpsat import cp_model

LinearExpr = cp_model.LinearExprT
RELAXED_WEIGHT = 10_000
"""Cost of breaking a required separation level once relaxWhenInfeasible turned it into a penalty."""


@dataclass
class Guard:
    """An assumption literal standing for one rule on one subject, for infeasibility explanations."""

    rule: str
    subject: str
    literal: cp_model.IntVar


@dataclass
class PlacementModel:
    problem: Problem
    explain: bool = False
    strengths_override: dict[str, str] = field(default_factory=dict)
    model: cp_model.CpModel = field(default_factory=cp_model.CpModel)
    n: dict[tuple[int, int, Role], cp_model.IntVar] = field(default_factory=dict)
    placed: dict[str, cp_model.IntVar] = field(default_factory=dict)
    """Per shard: its pending members are placed (all-or-nothing)."""
    costs: dict[str, list[tuple[int, LinearExpr]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    constants: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    guards: dict[tuple[str, str], Guard] = field(default_factory=dict)
    unplaced_terms: list[LinearExpr] = field(default_factory=list)
    domain_classes: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    by_class: dict[int, list[tuple[Group, Role, cp_model.IntVar]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def __post_init__(self) -> None:
        self._class_sets: dict[int, frozenset[int]] = {}
        for level in ("host", "rack", "zone"):
            domains: dict[str, list[int]] = defaultdict(list)
            for c in self.problem.classes:
                domains[self.problem.domain_of_class(c, level)].append(c.index)
            self.domain_classes[level] = dict(domains)
            for members in domains.values():
                self._class_sets[id(members)] = frozenset(members)

    # -- variables -----------------------------------------------------------------------------
    def var(self, g: int, c: int, role: Role) -> cp_model.IntVar | None:
        return self.n.get((g, c, role))

    def group_vars(
        self, group: Group, classes: Iterable[int] | None = None, role: Role | None = None
    ) -> list[cp_model.IntVar]:
        roles = (role,) if role is not None else group.roles
        if classes is None:
            cls: Iterable[int] = group.candidates
        else:
            # A domain holds far more classes than a group's (narrowed) candidates: walk the
            # smaller side. Domain lists are owned by this model, so their sets are kept.
            wanted = self._class_sets.get(id(classes))
            if wanted is not None and len(wanted) > len(group.candidates):
                cls = [c for c in group.candidates if c in wanted]
            else:
                cls = classes
        out = []
        for c in cls:
            for r in roles:
                v = self.n.get((group.index, c, r))
                if v is not None:
                    out.append(v)
        return out

    def shard_groups(self, shard: Shard) -> list[Group]:
        return [self.problem.groups[g] for g in shard.groups]

    def shard_count(
        self, shard: Shard, classes: Iterable[int] | None = None, role: Role | None = None
    ) -> LinearExpr:
        cls = None if classes is None else list(classes)
        return sum((v for g in self.shard_groups(shard) for v in self.group_vars(g, cls, role)), 0)

    def class_count(self, c: int, role: Role | None = None, weight: int = -1) -> LinearExpr:
        """Members placed in class c (optionally by role), each counted with a resource weight index."""
        return sum(
            (
                (1 if weight < 0 else g.requests[weight]) * v
                for g, r, v in self.by_class[c]
                if role is None or r == role
            ),
            0,
        )

    # -- rules' tools ----------------------------------------------------------------------------
    def strength(self, level: Level) -> str:
        return self.strengths_override.get(
            level, self.problem.policy.rules.replica_separation.strength(level)
        )

    def require(self, ct: cp_model.Constraint, rule: str, subject: str) -> None:
        """Make a hard constraint explainable: in explain mode it holds only under its guard literal."""
        if not self.explain:
            return
        key = (rule, subject)
        guard = self.guards.get(key)
        if guard is None:
            guard = Guard(rule, subject, self.model.new_bool_var(f"guard[{rule}|{subject}]"))
            self.guards[key] = guard
        ct.only_enforce_if(guard.literal)

    def add_cost(self, term: str, weight: int, expr: LinearExpr) -> None:
        if weight:
            self.costs[term].append((weight, expr))

    def add_constant(self, term: str, value: int) -> None:
        if value:
            self.constants[term] += value

    def classes_of(self, level: str, domain: str) -> list[int]:
        return self.domain_classes[level].get(domain, [])

    def class_obj(self, c: int) -> NodeClass:
        return self.problem.classes[c]


def build_variables(pm: PlacementModel) -> None:
    """Create n[g][c][role] and the placement structure every rule relies on."""
    problem = pm.problem
    m = pm.model
    partial = problem.policy.permit.allow_partial_shards
    for group in problem.groups:
        for c in group.candidates:
            cls = problem.classes[c]
            upper = min(group.size, cls.size)
            for role in group.roles:
                name = f"n[{group.index},{c},{role.value}]"
                var = m.new_bool_var(name) if upper == 1 else m.new_int_var(0, upper, name)
                pm.n[(group.index, c, role)] = var
                pm.by_class[c].append((group, role, var))

    for shard in problem.shards.values():
        groups = pm.shard_groups(shard)
        pending = [g for g in groups if g.origin_node is None]
        running = [g for g in groups if g.origin_node is not None]
        if pending and not partial:
            placed = m.new_bool_var(f"placed[{shard.key}]")
            pm.placed[shard.key] = placed
            for g in pending:
                m.add(sum(pm.group_vars(g), 0) == g.size * placed)
            pm.unplaced_terms.append(sum(g.size for g in pending) * (1 - placed))
        else:
            for g in pending:
                total = sum(pm.group_vars(g), 0)
                m.add(total <= g.size)
                pm.unplaced_terms.append(g.size - total)
        for g in running:
            m.add(sum(pm.group_vars(g), 0) == 1)

        master_capable = [g for g in groups if Role.MASTER in g.roles]
        if not master_capable:
            continue
        masters = sum((v for g in master_capable for v in pm.group_vars(g, role=Role.MASTER)), 0)
        fixed_master = 1 if shard.fixed_master is not None else 0
        if problem.mode == "rebalance" and running:
            m.add(masters + fixed_master == 1)
        elif fixed_master:
            m.add(masters == 0)
        elif shard.key in pm.placed:
            m.add(masters == pm.placed[shard.key])
        else:
            m.add(masters <= 1)
