"""A placement as zones > racks > nodes, each node with the Redis members it runs.

One ``Scene`` feeds both pictures of a placement: the text map (``-o map``, and ``demo``) and the
HTML page (``-o html``, placer/output/html.py). A scene also carries what to point out: nodes
with hard violations, nodes lost in a drill, and the domain whose failure hurts most.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from models.cluster import Role
from models.plan import Plan, Violation
from models.snapshot import Snapshot
from solver.drill import natural


@dataclass(frozen=True)
class Placed:
    """One Redis member on a node."""

    pod: str
    cluster: str
    shard: str
    role: str
    action: str = "keep"

    @property
    def mark(self) -> str:
        """``M:cache/0`` (master) or ``r:cache/0`` (replica): the cluster name without namespace."""
        return f"{'M' if self.role == Role.MASTER.value else 'r'}:{self.cluster.split('/')[-1]}/{self.shard}"


@dataclass
class NodeView:
    name: str
    zone: str
    rack: str
    members: list[Placed] = field(default_factory=list)
    down: bool = False
    problems: list[str] = field(default_factory=list)
    """Rules with a hard violation on this node."""

    @property
    def masters(self) -> list[Placed]:
        return [m for m in self.members if m.role == Role.MASTER.value]

    @property
    def replicas(self) -> list[Placed]:
        return [m for m in self.members if m.role != Role.MASTER.value]


@dataclass(frozen=True)
class Mark:
    """A domain to point out (the worst failure, a lost domain) and why."""

    level: str
    domain: str
    text: str
    kind: str = "worst"
    """``worst``: the failure that hurts most; ``down``: lost in the drill."""


@dataclass
class Scene:
    title: str
    zones: dict[str, dict[str, list[NodeView]]]
    marks: list[Mark] = field(default_factory=list)
    caption: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> list[NodeView]:
        return [n for racks in self.zones.values() for nodes in racks.values() for n in nodes]

    @property
    def clusters(self) -> list[str]:
        return sorted({m.cluster for n in self.nodes for m in n.members})

    def mark_of(self, level: str, domain: str) -> Mark | None:
        return next((m for m in self.marks if m.level == level and m.domain == domain), None)


def build_scene(
    snapshot: Snapshot,
    plan: Plan,
    title: str,
    *,
    violations: Iterable[Violation] | None = None,
    down: Iterable[str] = (),
    marks: Iterable[Mark] = (),
    caption: Iterable[str] = (),
) -> Scene:
    """The plan's final placement on the snapshot's nodes (a node missing a zone is in ``-``).

    ``violations`` default to the plan's; only hard ones flag nodes. ``down``: nodes lost.
    """
    lost = set(down)
    problems: dict[str, set[str]] = defaultdict(set)
    for v in plan.violations if violations is None else violations:
        if v.severity == "hard":
            for name in v.nodes:
                problems[name].add(v.rule)
    views = {
        n.name: NodeView(
            name=n.name,
            zone=n.zone or "-",
            rack=n.rack,
            down=n.name in lost,
            problems=sorted(problems.get(n.name, ())),
        )
        for n in snapshot.nodes
    }
    unplaced = {u.pod for u in plan.unplaced}
    for a in plan.assignments:
        view = views.get(a.node or "")
        if view is not None and a.pod not in unplaced:
            view.members.append(Placed(a.pod, a.cluster, a.shard, a.role, a.action))
    zones: dict[str, dict[str, list[NodeView]]] = defaultdict(lambda: defaultdict(list))
    for name in sorted(views, key=natural):
        view = views[name]
        view.members.sort(key=lambda m: (m.role != Role.MASTER.value, m.cluster, m.shard, m.pod))
        zones[view.zone][view.rack].append(view)
    ordered = {
        z: dict(sorted(zones[z].items(), key=lambda kv: natural(kv[0])))
        for z in sorted(zones, key=natural)
    }
    return Scene(title=title, zones=ordered, marks=list(marks), caption=list(caption))


def _flags(node: NodeView) -> str:
    flags = []
    if node.down:
        flags.append("down")
    if node.problems:
        flags.append("hard: " + ", ".join(node.problems))
    return f"  [{'; '.join(flags)}]" if flags else ""


def _domain_note(scene: Scene, level: str, domain: str) -> str:
    mark = scene.mark_of(level, domain)
    return f"  [{mark.text}]" if mark is not None else ""


def text_map(scene: Scene) -> str:
    """zones > racks > nodes, each node with its members (M = master, r = replica)."""
    lines = []
    for zone, racks in scene.zones.items():
        lines.append(f"zone {zone}{_domain_note(scene, 'zone', zone)}")
        for rack, nodes in racks.items():
            lines.append(f"  rack {rack}{_domain_note(scene, 'rack', rack)}")
            for node in nodes:
                members = " ".join(m.mark for m in node.members) or "."
                note = _domain_note(scene, "host", node.name)
                lines.append(f"    {node.name:<14} {members}{_flags(node)}{note}")
    return "\n".join(lines)


def text_maps(scenes: list[Scene], header: Iterable[str] = ()) -> str:
    """Several scenes one after the other, each under its title."""
    parts = ["\n".join(header)] if header else []
    parts.append("M master, r replica (cluster/shard); [down] lost; [hard: rule] hard violation")
    for scene in scenes:
        block = [f"== {scene.title} =="]
        block += scene.caption
        block.append(text_map(scene))
        parts.append("\n".join(block))
    return "\n\n".join(parts)


def topology_map(plan: Plan, snapshot: Snapshot) -> str:
    """The plain map of a plan's placement, as ``demo`` prints it."""
    return text_map(build_scene(snapshot, plan, "placement", violations=()))
