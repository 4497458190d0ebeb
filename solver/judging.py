"""Incremental judging: the checker's verdict on a plan, from a cached verdict on what runs.

A batch of new shards changes a few shards and the nodes they land on; the running placement
around them (on a large cluster, nearly every member and most of the violations) is the same
from one batch to the next. ``RunningVerdict`` keeps the checker's per-shard results (computed by
solver/check.py's own per-shard functions), per-node counts and per-domain counts of the running
placement; a plan's verdict recomputes only the shards the plan changes, the nodes those shards
touch and the domains those nodes are in, and re-derives every sum and maximum over domains from
the kept counts. It gives exactly ``check.assess``'s verdict (tests/test_judging.py compares the
two); like the checker it shares nothing with the CP-SAT encodings.

The cache is invalidated as the cluster's watch events touch it: ``update`` takes the new
snapshot and the nodes and shards that changed (a node event: that node; a pod event: its shard
and its node). Everything else is taken as unchanged.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from models.cluster import Node, Role
from models.plan import DomainLoss, Plan, Severity, Violation
from models.policy import LEVELS, Level, Policy
from models.snapshot import Snapshot
from solver.check import (
    Assessment,
    FinalMember,
    assess,
    capacity_violation,
    exclusivity_violation,
    fit_violation,
    separation_violation,
    shard_pairs,
    shard_roles,
    shard_spread,
    survival_levels,
    survive_violation,
)

_ROLES = {role.value: role for role in Role}
_SEPARATION: tuple[Level, ...] = ("rack", "zone")


_Domain = tuple[Level, str | None]
"""A domain at one level: (level, its name)."""


def _worst_per_cluster(by_domain: dict[str | None, dict[str, int]]) -> int:
    """Per Redis cluster, the most it has in one domain, summed over clusters."""
    worst: dict[str, int] = {}
    for counts in by_domain.values():
        for cluster, n in counts.items():
            if n > worst.get(cluster, 0):
                worst[cluster] = n
    return sum(worst.values())


def _domain_order(domain: str | None) -> tuple[bool, str]:
    return (domain is None, domain or "")


@dataclass
class _Shard:
    """One shard's final members and what every per-shard rule makes of them."""

    key: str
    cluster: str
    finals: list[FinalMember]
    alive: list[tuple[FinalMember, Node]]
    spread: list[Violation]
    roles: Violation | None
    pairs: dict[str, list[tuple[FinalMember, FinalMember]]]
    separation: dict[str, list[tuple[str, Violation]]]
    """Per level judged: (replica key, violation) of each pair."""
    exists: bool
    """Some member runs or is placed: a shard without one is not there to lose."""
    masters_exist: int
    masters_alive: int
    whole: dict[str, tuple[str | None] | None]
    """Per level: (the one domain holding all its alive members,), or None when none does."""


def _shard(
    key: str, finals: list[FinalMember], nodes: dict[str, Node], severity: dict[str, Severity]
) -> _Shard:
    alive = [(f, nodes[f.node]) for f in finals if f.node is not None and f.node in nodes]
    masters = [f for f in finals if f.node is not None and f.role is Role.MASTER]
    pairs: dict[str, list[tuple[FinalMember, FinalMember]]] = {"rack": [], "zone": []}
    if len(masters) == 1 and masters[0].node in nodes:
        master = masters[0]
        master_node = nodes[master.node]  # type: ignore[index]
        for level in _SEPARATION:
            pairs[level] = shard_pairs(nodes, master, master_node, finals, level)
    whole: dict[str, tuple[str | None] | None] = {}
    for level in LEVELS:
        held = {node.domain(level) for _, node in alive}
        whole[level] = (next(iter(held)),) if len(held) == 1 else None
    exists = [f for f in finals if f.node is not None or not f.member.pod.pending]
    separation = {
        level: [
            (r.key, separation_violation(nodes, level, how, r, m))  # type: ignore[arg-type]
            for r, m in pairs[level]
        ]
        for level, how in severity.items()
    }
    return _Shard(
        key=key,
        cluster=finals[0].cluster,
        finals=finals,
        alive=alive,
        spread=shard_spread(key, alive),
        roles=shard_roles(key, finals),
        pairs=pairs,
        separation=separation,
        exists=bool(exists),
        masters_exist=sum(1 for f in exists if f.role is Role.MASTER),
        masters_alive=sum(1 for f, _ in alive if f.role is Role.MASTER),
        whole=whole,
    )


def _bump(counts: dict[Any, int], key: Any, by: int) -> None:
    n = counts.get(key, 0) + by
    if n:
        counts[key] = n
    else:
        counts.pop(key, None)


class _State:
    """Everything the verdict is assembled from. A ``fork`` copies the outer containers; an
    inner one it has not made itself is copied before its first change, so a fork never
    changes the state it came from."""

    def __init__(self, survive: str, survival_level: str, levels: tuple[Level, ...]) -> None:
        self.survive = survive
        self.survival_level = survival_level
        self.levels = levels
        """The levels whose one-domain losses are judged (check.survival_levels)."""
        self.parts: dict[str, _Shard] = {}
        self.node_used: dict[str, tuple[int, int, int]] = {}
        """Per node: cpu, memory and pods of the alive members on it."""
        self.node_members: dict[str, int] = {}
        self.node_masters: dict[str, tuple[str, ...]] = {}
        self.dom_masters: dict[str, dict[str | None, dict[str, int]]] = {lv: {} for lv in LEVELS}
        """Per level and domain: alive masters per Redis cluster."""
        self.rack_masters: dict[str | None, dict[str, int]] = {}
        """Per rack inside its zone (``zone/rack``): alive masters per Redis cluster, for
        rackSurvival (a rack label repeated in two zones names two racks)."""
        self.zone_members: dict[str | None, dict[str, int]] = {}
        """Per zone: alive members per Redis cluster, for memberSpread."""
        self.dom_alive: dict[str, dict[str | None, int]] = {lv: {} for lv in LEVELS}
        self.dom_whole: dict[str, dict[str | None, set[str]]] = {lv: {} for lv in LEVELS}
        """Per level and domain: shards whose alive members are all in it."""
        self.here: dict[_Domain, dict[str, tuple[tuple[FinalMember, Node], ...]]] = {}
        """Per judged (level, domain) and shard: its alive members there."""
        self.dom_nodes: dict[_Domain, dict[str, int]] = {}
        self.masters_total: dict[str, int] = {}
        self.masters_alive: dict[str, int] = {}
        self.dead: frozenset[str] = frozenset()
        self.pairs: dict[str, int] = {"rack": 0, "zone": 0}
        self.balance = 0
        """Masters beyond the first on any node."""
        self.util: dict[str, int] = {}
        """Memory utilisation (percent) of every node hosting a member."""
        self.exclusive: dict[str, Violation] = {}
        self.losses: dict[_Domain, tuple[object, Violation]] = {}
        """Per judged (level, domain) with a violation: what it was built from, and it."""
        self._owned: dict[int, object] = {}

    def fork(self) -> "_State":
        copy = _State(self.survive, self.survival_level, self.levels)
        for name in (
            "parts",
            "node_used",
            "node_members",
            "node_masters",
            "here",
            "dom_nodes",
            "rack_masters",
            "zone_members",
        ):
            setattr(copy, name, dict(getattr(self, name)))
        for name in ("masters_total", "masters_alive", "pairs", "util", "exclusive", "losses"):
            setattr(copy, name, dict(getattr(self, name)))
        for name in ("dom_masters", "dom_alive", "dom_whole"):
            setattr(copy, name, {lv: dict(v) for lv, v in getattr(self, name).items()})
        copy.dead, copy.balance = self.dead, self.balance
        return copy

    def _mine(self, outer: dict[Any, Any], key: Any, make: type) -> Any:
        """The inner container at ``outer[key]``, safe to change (made or copied here)."""
        inner = outer.get(key)
        if inner is None or id(inner) not in self._owned:
            inner = outer[key] = make() if inner is None else make(inner)
            self._owned[id(inner)] = inner
        return inner

    def _count(self, outer: dict[Any, Any], key: Any, item: Any, by: int) -> None:
        inner = self._mine(outer, key, dict)
        _bump(inner, item, by)
        if not inner:
            del outer[key]

    def apply(self, part: _Shard, sign: int, nodes: set[str], domains: set[_Domain]) -> None:
        """Add (sign 1) or take away (sign -1) one shard's contribution; note what it touches."""
        if sign > 0:
            self.parts[part.key] = part
        else:
            del self.parts[part.key]
        judged = self.levels
        grouped: dict[_Domain, list[tuple[FinalMember, Node]]] = {}
        for f, node in part.alive:
            name = node.name
            nodes.add(name)
            r = f.member.pod.requests
            used = self.node_used.get(name, (0, 0, 0))
            self.node_used[name] = (
                used[0] + sign * r.cpu,
                used[1] + sign * r.memory,
                used[2] + sign * r.pods,
            )
            _bump(self.node_members, name, sign)
            if not self.node_members.get(name):
                self.node_used.pop(name, None)
            master = f.role is Role.MASTER
            if master:
                keys = self.node_masters.get(name, ())
                keys = (*keys, f.key) if sign > 0 else tuple(k for k in keys if k != f.key)
                if keys:
                    self.node_masters[name] = keys
                else:
                    self.node_masters.pop(name, None)
            for level in LEVELS:
                domain = node.domain(level)
                _bump(self.dom_alive[level], domain, sign)
                if master:
                    self._count(self.dom_masters[level], domain, part.cluster, sign)
            if master:
                self._count(self.rack_masters, f"{node.zone}/{node.rack}", part.cluster, sign)
            self._count(self.zone_members, node.zone, part.cluster, sign)
            for level in judged:
                at = (level, node.domain(level))
                domains.add(at)
                self._count(self.dom_nodes, at, name, sign)
                grouped.setdefault(at, []).append((f, node))
        for at, members in grouped.items():
            shards = self._mine(self.here, at, dict)
            if sign > 0:
                shards[part.key] = tuple(members)
            else:
                shards.pop(part.key, None)
                if not shards:
                    del self.here[at]
        for level in LEVELS:
            one = part.whole[level]
            if one is not None:
                (whole,) = one
                per_level = self.dom_whole[level]
                held = self._mine(per_level, whole, set)
                if sign > 0:
                    held.add(part.key)
                else:
                    held.discard(part.key)
                    if not held:
                        del per_level[whole]
        if part.masters_exist:
            _bump(self.masters_total, part.cluster, sign * part.masters_exist)
        if part.masters_alive:
            _bump(self.masters_alive, part.cluster, sign * part.masters_alive)
        if part.exists and not part.alive:
            self.dead = self.dead | {part.key} if sign > 0 else self.dead - {part.key}
        for level in _SEPARATION:
            self.pairs[level] += sign * len(part.pairs[level])


class RunningVerdict:
    """The checker's verdict on the running placement, kept per shard, node and domain, and the
    verdict on any plan over the same snapshot from it and what the plan changes."""

    def __init__(self, snapshot: Snapshot, policy: Policy) -> None:
        self.policy = policy
        rules = policy.rules
        self.snapshot = snapshot
        self._severity: dict[str, Severity] = {}
        for level in _SEPARATION:
            strength = rules.replica_separation.strength(level)
            if strength != "ignore":
                self._severity[level] = "hard" if strength == "required" else "soft"
        # survival counts zones, whatever survive says
        self._levels = tuple(survival_levels(policy, snapshot.nodes))
        self._state = _State(rules.survive, "zone", self._levels)
        self._base: dict[str, FinalMember] = {}
        self._same: dict[str, Any] = {}
        """Per pod: an assignment object already found to leave it as it runs. The binder's
        plans share their running members' assignments, so most are recognised by identity."""
        self._lists: dict[str, list[tuple[str, str, Violation]]] | None = None
        """The running placement's per-shard violations, each list in the checker's order:
        (sort key, shard, violation)."""
        self._on_node: dict[str, dict[str, int]] = {}
        """Per node name (in the snapshot or not): shards with members bound to it."""
        self._other: dict[str, tuple[int, int, int]] = {}
        self._order: dict[str, int] | None = None
        self._other_pods()
        self._refresh(snapshot, set(snapshot.shards), set())

    # ------------------------------------------------------------------ invalidation

    def update(
        self, snapshot: Snapshot, nodes: Iterable[str] = (), shards: Iterable[str] = ()
    ) -> None:
        """Take a new snapshot in which only ``nodes`` (the Node added, changed or gone) and
        ``shards`` (a member added, changed or gone) differ. A pod bound or unbound is its
        shard's change: the nodes it left and joined are recounted from that shard's old and
        new members, and the other shards there are not judged again (their part reads only
        their own members and nodes). Unmanaged load is compared here, node by node."""
        nodes, shards = set(nodes), set(shards)
        if nodes and tuple(survival_levels(self.policy, snapshot.nodes)) != self._levels:
            self.__init__(snapshot, self.policy)  # type: ignore[misc]  # the rack level came or went
            return
        for name in nodes:
            shards |= set(self._on_node.get(name, ()))
        self.snapshot = snapshot
        self._order = None
        self._lists = None
        # Unmanaged load moves with every pod event (a shard left out of planning turns its
        # members into load): the nodes whose load changed are touched too.
        before = self._other
        self._other_pods()
        nodes |= {
            n for n in before.keys() | self._other.keys() if before.get(n) != self._other.get(n)
        }
        self._refresh(snapshot, shards, nodes)

    def _other_pods(self) -> None:
        other: dict[str, list[int]] = {}
        for pod in self.snapshot.other_pods:
            if pod.node_name:
                total = other.setdefault(pod.node_name, [0, 0, 0])
                r = pod.requests
                total[0] += r.cpu
                total[1] += r.memory
                total[2] += r.pods
        self._other = {name: (t[0], t[1], t[2]) for name, t in other.items()}

    def _refresh(self, snapshot: Snapshot, shards: set[str], nodes: set[str]) -> None:
        state = self._state
        grouped = snapshot.shards
        touched_nodes, touched_domains = set(nodes), set[_Domain]()
        for name in nodes:
            node = snapshot.node_by_name.get(name)
            if node is not None:
                touched_domains.update((level, node.domain(level)) for level in state.levels)
        for key in shards:
            old = state.parts.get(key)
            if old is not None:
                state.apply(old, -1, touched_nodes, touched_domains)
                for f in old.finals:
                    self._base.pop(f.key, None)
                    self._same.pop(f.key, None)
                    self._unbind(f, key)
        # Only then the new members: a pod that changed shards is in an old and a new one.
        for key in shards:
            members = grouped.get(key)
            if not members:
                continue
            finals = []
            for m in members:
                bound = m.pod.node_name
                f = FinalMember(
                    m, bound, m.role or Role.REPLICA, "keep", False, m.key, key, m.cluster
                )
                finals.append(f)
                self._base[m.key] = f
                if bound is not None:
                    on = self._on_node.setdefault(bound, {})
                    on[key] = on.get(key, 0) + 1
            part = _shard(key, finals, snapshot.node_by_name, self._severity)
            state.apply(part, 1, touched_nodes, touched_domains)
        self._nodes(state, touched_nodes)
        self._domains(state, touched_domains)

    def _unbind(self, f: FinalMember, shard: str) -> None:
        if f.node is None:
            return
        on = self._on_node.get(f.node)
        if on is not None:
            _bump(on, shard, -1)
            if not on:
                del self._on_node[f.node]

    # ------------------------------------------------------------------ derived per node / domain

    def _nodes(self, state: _State, names: set[str]) -> None:
        limit = self.policy.rules.max_masters_per_node
        nodes = self.snapshot.node_by_name
        for name in names:
            state.exclusive.pop(name, None)
            keys = state.node_masters.get(name, ())
            if len(keys) > limit:
                state.exclusive[name] = exclusivity_violation(name, list(keys), limit)
            state.util.pop(name, None)
            node = nodes.get(name)
            if name in state.node_members and node is not None and node.allocatable.memory > 0:
                memory = state.node_used[name][1] + self._other.get(name, (0, 0, 0))[1]
                state.util[name] = 100 * memory // node.allocatable.memory
        state.balance = sum(max(0, len(k) - 1) for k in state.node_masters.values())

    def _loss(
        self, state: _State, at: _Domain, short: set[str]
    ) -> tuple[frozenset[str], tuple[tuple[str, int, int], ...]]:
        """What losing one domain takes down, as a signature: the shards, and the (cluster,
        left, total) of clusters short of a majority. ``short``: the clusters short of a
        majority whatever is lost; any other falls short only by losing masters here."""
        level, domain = at
        total, alive = state.masters_total, state.masters_alive
        masters_in = state.dom_masters[level].get(domain, {})
        whole = state.dom_whole[level].get(domain)
        lost = state.dead | whole if whole else state.dead
        clusters = []
        for k in short | masters_in.keys():
            n = total.get(k)
            if n is None:
                continue
            left = alive.get(k, 0) - masters_in.get(k, 0)
            if 2 * left <= n:
                clusters.append((k, left, n))
        clusters.sort()
        return lost, tuple(clusters)

    def _domains(self, state: _State, touched: set[_Domain]) -> None:
        """Survive violations (hard at ``rules.survive``'s level, soft elsewhere): rebuilt for
        touched domains and for any domain whose losses changed (a shard died, a cluster's
        master counts moved)."""
        for at in list(state.losses):
            if at not in state.here:
                del state.losses[at]
        alive = state.masters_alive
        short = {k for k, n in state.masters_total.items() if 2 * alive.get(k, 0) <= n}
        for at in state.here:
            signature = self._loss(state, at, short)
            cached = state.losses.get(at)
            if at not in touched and cached is not None and cached[0] == signature:
                continue
            state.losses.pop(at, None)
            failing, short_here = signature
            if not failing and not short_here:
                continue
            failing_clusters = {k for k, _, _ in short_here}
            shards = state.here[at]
            pods = sorted(
                f.key
                for key, members in shards.items()
                for f, _ in members
                if key in failing or f.cluster in failing_clusters
            )
            level, domain = at
            severity: Severity = "hard" if level == state.survive else "soft"
            if domain is None and severity == "soft":
                continue  # nodes without the label are no one domain (as check.py)
            violation = survive_violation(
                level,
                domain,
                pods,
                sorted(state.dom_nodes[at]),
                sorted(failing),
                list(short_here),
                severity,
            )
            state.losses[at] = (signature, violation)

    # ------------------------------------------------------------------ a plan's verdict

    def assess(self, snapshot: Snapshot, policy: Policy, plan: Plan) -> Assessment:
        """``check.assess(snapshot, policy, plan)``, from the cache when it holds this snapshot
        and policy (otherwise the full judgement)."""
        if snapshot is not self.snapshot or (policy is not self.policy and policy != self.policy):
            return assess(snapshot, policy, plan)
        if snapshot.free_volumes:
            # Free local PVs are matched to claims across a node's pods: judged whole.
            return assess(snapshot, policy, plan)
        base = self._base
        changed: dict[str, FinalMember] = {}
        moves = 0
        unplaced = {u.pod for u in plan.unplaced}
        assigned = {a.pod for a in plan.assignments} if unplaced else set()
        same = self._same
        for a in plan.assignments:
            pod = a.pod
            if same.get(pod) is a and pod not in unplaced:
                if changed:
                    changed.pop(pod, None)
                continue
            if a.action == "move":
                moves += 1
            b = base.get(pod)
            if b is None:
                continue
            node = None if pod in unplaced else a.node
            role = _ROLES[a.role]
            current = b.member.pod.node_name
            arrives = node is not None and (a.action in ("place", "move") or node != current)
            if node == b.node and role is b.role and not arrives:
                changed.pop(pod, None)
                if pod not in unplaced:
                    same[pod] = a
            else:
                changed[a.pod] = FinalMember(
                    b.member, node, role, a.action, arrives, b.key, b.shard, b.cluster
                )
        for key in unplaced - assigned:
            b = base.get(key)
            if b is not None and b.node is not None:
                changed[key] = b._replace(node=None)
        state = self._state.fork() if changed else self._state
        touched = {f.shard for f in changed.values()}
        if changed:
            nodes_touched: set[str] = set()
            domains_touched: set[_Domain] = set()
            node_by_name = snapshot.node_by_name
            for shard in touched:
                old = state.parts[shard]
                finals = [changed.get(f.key, f) for f in old.finals]
                state.apply(old, -1, nodes_touched, domains_touched)
                part = _shard(shard, finals, node_by_name, self._severity)
                state.apply(part, 1, nodes_touched, domains_touched)
            self._nodes(state, nodes_touched)
            self._domains(state, domains_touched)
        violations = [
            *self._arrivals(snapshot, state, changed),
            *self._violations(state, touched),
        ]
        return Assessment(
            violations=violations,
            terms=self._terms(state, moves, len(plan.failovers)),
            worst_domain_loss=self._worst(state),
        )

    def _arrivals(
        self, snapshot: Snapshot, state: _State, changed: dict[str, FinalMember]
    ) -> list[Violation]:
        """fits and capacity: only members the plan sends somewhere can break them."""
        arriving = [f for f in changed.values() if f.arrives and f.node is not None]
        if not arriving:
            return []
        if len(arriving) > 1:
            if self._order is None:
                self._order = {m.key: i for i, m in enumerate(snapshot.members)}
            order = self._order
            arriving.sort(key=lambda f: order[f.key])
        nodes = snapshot.node_by_name
        fits = [v for v in (fit_violation(f, nodes) for f in arriving) if v is not None]
        on: dict[str, list[str]] = {}
        for f in arriving:
            name = f.node
            if name is not None and name in nodes:
                on.setdefault(name, []).append(f.key)
        capacity = []
        for name in sorted(on):
            members = state.node_used.get(name, (0, 0, 0))
            other = self._other.get(name, (0, 0, 0))
            need = [members[i] + other[i] for i in range(3)]
            v = capacity_violation(nodes[name], need, on[name])
            if v is not None:
                capacity.append(v)
        return [*fits, *capacity]

    @staticmethod
    def _entries(part: _Shard) -> dict[str, list[tuple[str, str, Violation]]]:
        key = part.key
        entries = {
            "spread": [(key, key, v) for v in part.spread],
            "roles": [(key, key, part.roles)] if part.roles is not None else [],
        }
        for level, pairs in part.separation.items():
            entries[level] = [(replica, key, v) for replica, v in pairs]
        return entries

    def _violations(self, state: _State, touched: set[str]) -> list[Violation]:
        """Per-shard violations: the running placement's, with the touched shards' replaced."""
        if self._lists is None:
            lists: dict[str, list[tuple[str, str, Violation]]] = {
                "spread": [],
                "roles": [],
                **{level: [] for level in self._severity},
            }
            for part in self._state.parts.values():
                for name, entries in self._entries(part).items():
                    lists[name].extend(entries)
            for entries in lists.values():
                entries.sort(key=lambda e: e[0])
            self._lists = lists
        lists = self._lists
        if touched:
            lists = {k: [e for e in v if e[1] not in touched] for k, v in lists.items()}
            for shard in touched:
                now = state.parts.get(shard)
                if now is not None:
                    for name, entries in self._entries(now).items():
                        lists[name].extend(entries)
            for entries in lists.values():
                entries.sort(key=lambda e: e[0])
        out = [v for _, _, v in lists["spread"]]
        out.extend(state.exclusive[name] for name in sorted(state.exclusive))
        out.extend(v for _, _, v in lists["roles"])
        for level in _SEPARATION:
            if level in self._severity:
                out.extend(v for _, _, v in lists[level])
        rank = {level: i for i, level in enumerate(state.levels)}
        out.extend(
            state.losses[at][1]
            for at in sorted(state.losses, key=lambda at: (rank[at[0]], *_domain_order(at[1])))
        )
        return out

    def _terms(self, state: _State, moves: int, failovers: int) -> dict[str, float]:
        weights, rules = self.policy.weights, self.policy.rules
        terms: dict[str, float] = {}
        for level in _SEPARATION:
            preferred = rules.replica_separation.strength(level) == "preferred"
            terms[level] = (
                float(weights.separation(level) * state.pairs[level]) if preferred else 0.0
            )
        masters_by_zone = state.dom_masters[state.survival_level]
        terms["survival"] = float(weights.survival * _worst_per_cluster(masters_by_zone))
        rack = _worst_per_cluster(state.rack_masters)
        terms["rackSurvival"] = float(weights.rack_survival * rack)
        members = _worst_per_cluster(state.zone_members)
        terms["memberSpread"] = float(weights.member_spread * members)
        on_old = sum(state.node_members.get(name, 0) for name in self.snapshot.superseded)
        terms["superseded"] = float(weights.superseded * on_old)
        terms["masterBalance"] = float(weights.master_balance * state.balance)
        terms["loadBalance"] = float(weights.load_balance * max(state.util.values(), default=0))
        terms["move"] = float(weights.move * moves)
        terms["failover"] = float(weights.failover * failovers)
        terms["total"] = sum(terms.values())
        return terms

    def _worst(self, state: _State) -> list[DomainLoss]:
        dead = len(state.dead)
        total = state.masters_total
        result = []
        for level in LEVELS:
            masters, whole = state.dom_masters[level], state.dom_whole[level]
            best: tuple[float, int] | None = None
            chosen: list[tuple[str | None, str | None]] = []
            for domain in state.dom_alive[level]:
                ratio, cluster = 0.0, None
                for k, n in masters.get(domain, {}).items():
                    share = n / total[k]
                    if cluster is None or share > ratio or (share == ratio and k < cluster):
                        ratio, cluster = share, k
                value = (ratio, dead + len(whole.get(domain, ())))
                if best is None or value > best:
                    best, chosen = value, [(domain, cluster)]
                elif value == best:
                    chosen.append((domain, cluster))
            if best is None:
                result.append(DomainLoss(level=level, domain=None, master_loss_ratio=0.0))
                continue
            domain, cluster = min(chosen, key=lambda c: _domain_order(c[0]))
            result.append(
                DomainLoss(
                    level=level,
                    domain=domain,
                    master_loss_ratio=best[0],
                    cluster=cluster,
                    shards_lost=best[1],
                )
            )
        return result
