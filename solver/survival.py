"""Survival, the tool's promise, as a verdict per level: does every Redis cluster keep each
shard and a strict majority of its masters through the loss of any one host, rack or zone?

Judged on a finished placement by the checker's own counting (solver/check.py), never by the
CP-SAT encoding. Where no placement on the domains there are could survive, the verdict says
so and what would: Redis promotes a replica only with a majority of masters, so a cluster of M
masters survives the loss of one of D domains only if every domain holds fewer than M/2 of them,
which D domains of at most (M - 1) // 2 masters each must be able to hold.
"""

from collections import defaultdict
from collections.abc import Iterable

from models.cluster import Member, Node
from models.plan import DomainTakes, LevelVerdict, Plan
from models.policy import Level, Policy
from models.snapshot import Snapshot
from models.words import first_few, plural
from solver.check import Takes, domain_takes, final_placement, survival_levels
from solver.predicates import node_accepts_new_pods


def majority_possible(masters: int, domains: int) -> bool:
    """Some spread of ``masters`` over ``domains`` leaves a strict majority after any one's loss."""
    return masters >= 1 and domains * ((masters - 1) // 2) >= masters


def _counts_text(counts: list[int], open_from: int) -> str:
    """[3], 5 -> '3, or 5 and more,'; [], 5 -> '5 or more'."""
    tail = f"{open_from} or more" if not counts else f"or {open_from} and more,"
    return ", ".join([*map(str, counts), tail]) if counts else tail


def what_would(masters: int, domains: int, level: str) -> str:
    """The shard counts (and the domain count) whose masters could survive one domain's loss."""
    if domains < 3:
        return (
            f"no number of shards survives losing one of {plural(domains, level)}: a third "
            f"{level} would, with 3, or 5 and more, shards"
            if level != "host"
            else "more hosts would"
        )
    # From ``open_from`` on every count works: D * ((M - 1) // 2) >= M for all larger M.
    open_from = next(
        m for m in range(3, 64) if all(majority_possible(k, domains) for k in range(m, m + 8))
    )
    above = [m for m in range(masters + 1, open_from) if majority_possible(m, domains)]
    start = max(masters + 1, open_from)
    text = f"{_counts_text(above, start)} shards would survive"
    fewer = [m for m in range(masters - 1, 2, -1) if majority_possible(m, domains)]
    if fewer:
        text += f" (or {fewer[0]})"
    needed = (
        next(d for d in range(domains + 1, domains + 64) if majority_possible(masters, d))
        if masters >= 3
        else None
    )
    if needed is not None and level != "host":
        text += f", and so would {plural(needed, level)}"
    return text


def cannot_survive(
    cluster: str, masters: int, shard_sizes: dict[str, int], domains: int, level: str
) -> str | None:
    """Why no placement of the cluster over ``domains`` domains survives one's loss, and what
    would; None when some placement could (capacity aside)."""
    if domains == 0:
        return f"{cluster}: no {level} holds its pods or accepts new ones"
    if domains == 1:
        return (
            f"{cluster}: the nodes it can run on are in one {level}, whose loss takes everything; "
            f"{level}s of their own would be needed (3, with 3 or 5 and more shards)"
        )
    if not majority_possible(masters, domains):
        most = -(-masters // domains)  # some domain holds at least this many
        left = masters - max(most, 1)
        why = (
            f"{cluster} has {plural(masters, 'master')} over {plural(domains, level)}: some "
            f"{level} holds {most} of them, and the {left} left {'is' if left == 1 else 'are'} "
            "no majority"
            if masters >= 3
            else f"{cluster} has {plural(masters, 'master')}: losing one leaves "
            f"{masters - 1} of {masters}, no majority"
        )
        return f"{why}; {what_would(masters, domains, level)}"
    single = sorted(shard for shard, size in shard_sizes.items() if size < 2)
    if single:
        listed = first_few(single, 3)
        which = f"shard {listed} has" if len(single) == 1 else f"shards {listed} have"
        return f"{cluster}: {which} one member, lost with its {level}; a replica each would survive"
    return None


_open: dict[Level, tuple[tuple[Node, ...], frozenset[str | None]]] = {}
"""Per level, the last nodes asked about and the domains of those taking new pods: the binder
asks batch after batch about the same nodes (one tuple while no node changes)."""


def _open_domains(nodes: tuple[Node, ...], level: Level) -> frozenset[str | None]:
    """The named domains of the nodes that take new pods."""
    kept = _open.get(level)
    if kept is not None and kept[0] is nodes:
        return kept[1]
    found = frozenset(node.domain(level) for node in nodes if node_accepts_new_pods(node))
    found -= {None}
    _open[level] = (nodes, found)
    return found


def _domains_with(nodes: tuple[Node, ...], level: Level, running: Iterable[Node]) -> int:
    """Domains that could hold a Redis cluster's members: those of nodes that take new pods, and
    those its members run in now (an upper bound, so 'cannot' is proven). Counted without
    copying the open ones: at the host level they are every node, for every cluster."""
    open_domains = _open_domains(nodes, level)
    more = {node.domain(level) for node in running} - open_domains
    more.discard(None)
    return len(open_domains) + len(more)


def _domains(snapshot: Snapshot, level: Level, members: list[Member]) -> int:
    """``_domains_with`` for these members' running nodes."""
    nodes: dict[str, Node] = snapshot.node_by_name
    running = (nodes.get(m.pod.node_name or "") for m in members)
    return _domains_with(snapshot.nodes, level, (n for n in running if n is not None))


_unlabelled_seen: dict[Level, tuple[tuple[Node, ...], frozenset[str]]] = {}
"""Per level, the last nodes asked about and those of them without the label that would take
new pods but for it (the binder asks batch after batch about the same nodes)."""


def _unlabelled(nodes: tuple[Node, ...], level: Level, running: Iterable[Node] = ()) -> set[str]:
    """The nodes without the level's label that would take new pods but for it, and those of
    ``running`` (holding Redis pods) without it: in which domain they are is unknown."""
    kept = _unlabelled_seen.get(level)
    if kept is None or kept[0] is not nodes:
        open_ = frozenset(
            n.name for n in nodes if n.domain(level) is None and n.ready and not n.unschedulable
        )
        kept = _unlabelled_seen[level] = (nodes, open_)
    return set(kept[1]).union(n.name for n in running if n.domain(level) is None)


def unsurvivable(snapshot: Snapshot, policy: Policy) -> dict[str, list[str]]:
    """Per level in use: for each Redis cluster no placement could keep through one domain's
    loss, why and what would. One walk over each cluster's members serves every level.

    Where nodes the cluster runs on or could run on lack the level's label, the domains they
    are in are unknown: each counts as a domain of its own, so that the count stays an upper
    bound and "cannot" stays proven."""
    clusters: dict[str, list[Member]] = defaultdict(list)
    for m in (*snapshot.members, *snapshot.skipped_members):
        clusters[m.cluster].append(m)
    levels = survival_levels(policy, snapshot.nodes)
    found: dict[str, list[str]] = {level: [] for level in levels}
    if not levels:
        return found
    nodes: dict[str, Node] = snapshot.node_by_name
    unlabelled_open = {level: _unlabelled(snapshot.nodes, level) for level in levels}
    for cluster, members in sorted(clusters.items()):
        sizes: dict[str, int] = defaultdict(int)
        running: set[str] = set()
        for m in members:
            sizes[m.shard] += 1
            if m.pod.node_name in nodes:
                running.add(m.pod.node_name)
        on = [nodes[name] for name in running]
        for level in levels:
            # Each node without the label may be a domain of its own: still an upper bound.
            held = _domains_with(snapshot.nodes, level, on)
            held += len(unlabelled_open[level] | _unlabelled(snapshot.nodes, level, on))
            note = cannot_survive(cluster, len(sizes), dict(sizes), held, level)
            if note is not None:
                found[level].append(note)
    return found


def survival_verdicts(
    snapshot: Snapshot, policy: Policy, plan: Plan, judged: bool = False
) -> list[LevelVerdict]:
    """Per level in use (host, rack, zone): survived, or which domain takes what.

    ``judged``: ``plan.violations`` is the checker's whole verdict on the plan over this
    snapshot (a CP-SAT solve's). A domain whose loss takes something is always one of its
    survive violations, so with none of them no domain is counted loss by loss."""
    impossible = unsurvivable(snapshot, policy)
    nodes = snapshot.node_by_name
    held_nodes = [
        nodes[name]
        for name in {name for name, _ in final_placement(snapshot, plan).values()}
        if name is not None and name in nodes
    ]
    levels = survival_levels(policy, snapshot.nodes)
    may_take = not judged or any(v.rule == "survive" for v in plan.violations)
    takes = domain_takes(snapshot, plan, levels) if may_take else Takes({}, [], {})
    before = _lost_texts(takes.dead_shards, takes.short)
    dead = set(takes.dead_shards)
    held_names = {n.name for n in held_nodes}
    verdicts = []
    for level in levels:
        domains = len({n.domain(level) for n in held_nodes} - {None})
        taken = _beyond(takes.by_level.get(level, []), dead, takes.short)
        unlabelled = sorted(_unlabelled(snapshot.nodes, level, held_nodes))
        running_unlabelled = [name for name in unlabelled if name in held_names]
        verdicts.append(
            LevelVerdict(
                level=level,
                domains=domains,
                survived=not taken and not before and domains > 0 and not running_unlabelled,
                severity="hard" if policy.rules.survive == level else "soft",
                takes=taken,
                cannot_survive=impossible.get(level, []),
                lost_already=before,
                label=policy.topology.key(level) or "",
                unlabelled=unlabelled,
                unlabelled_running=running_unlabelled,
            )
        )
    return verdicts


def _beyond(
    takes: list[DomainTakes], dead: set[str], short: dict[str, tuple[int, int]]
) -> list[DomainTakes]:
    """What each domain's loss takes beyond what is lost already: a cluster already short of a
    majority is down whatever fails, and a dead shard is no domain's doing."""
    kept = []
    for t in takes:
        if t.cluster in short:
            continue
        shards = [s for s in t.shards_lost if f"{t.cluster}/{s}" not in dead]
        if shards or t.majority_lost:
            kept.append(
                t if shards == t.shards_lost else t.model_copy(update={"shards_lost": shards})
            )
    return kept


def _lost_texts(dead: list[str], short: dict[str, tuple[int, int]]) -> list[str]:
    texts = []
    for cluster, (alive, total) in sorted(short.items()):
        texts.append(
            f"{cluster} has {alive} of {plural(total, 'master')} on a node of the snapshot, "
            "no majority"
        )
    if dead:
        listed = first_few(dead, 3)
        texts.append(f"shard(s) {listed} have no member on a node of the snapshot")
    return texts


def verdicts_for(
    snapshot: Snapshot, policy: Policy, plan: Plan, clusters: set[str], judged: bool = False
) -> list[LevelVerdict]:
    """The verdict for some Redis clusters only (the binder's batch): the others' members are
    left out of the count, so the work is theirs alone. ``judged`` as ``survival_verdicts``:
    the whole cluster's survive violations include these clusters' ones."""
    part = snapshot.model_copy(
        update={
            "members": tuple(m for m in snapshot.members if m.cluster in clusters),
            "skipped_members": tuple(m for m in snapshot.skipped_members if m.cluster in clusters),
        }
    )
    return survival_verdicts(part, policy, plan, judged)


def survival_after(
    snapshot: Snapshot, policy: Policy, cluster: str, more: int, shard_size: int
) -> list[str]:
    """Per level in use: whether the Redis cluster, with ``more`` shards of ``shard_size`` added
    to what runs, could survive one domain's loss (capacity aside), and what would if not."""
    members = [m for m in snapshot.members if m.cluster == cluster and not m.pod.pending]
    sizes: dict[str, int] = defaultdict(int)
    for m in members:
        sizes[m.shard] += 1
    for i in range(more):
        sizes[f"+{i}"] = shard_size
    total = len(sizes)
    if total == 0:
        # No master to keep: nothing to judge, which is neither a loss nor survival.
        return [f"not judged: {cluster} would have no shard (none runs and none is added)"]
    notes = []
    for level in survival_levels(policy, snapshot.nodes):
        domains = _domains(snapshot, level, members)
        note = cannot_survive(cluster, total, dict(sizes), domains, level)
        if note is None:
            notes.append(
                f"with {plural(total, 'shard')} in all, {cluster} can survive losing a {level} "
                f"({plural(domains, level)})"
            )
        else:
            notes.append(
                f"with {plural(total, 'shard')} in all, no placement survives losing a {level}: {note}"
            )
    return notes
