"""Plans and audits as text: tables for people, JSON and YAML for tools."""

import json
from collections import defaultdict

import yaml

from models.cluster import Role
from models.plan import Plan, Violation
from models.snapshot import Snapshot


def as_document(plan: Plan, fmt: str) -> str:
    data = plan.to_json_dict()
    if fmt == "json":
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line.rstrip()]
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out)


def plan_table(plan: Plan, snapshot: Snapshot, *, only_changes: bool = False) -> str:
    nodes = snapshot.node_by_name
    rows = []
    for a in plan.assignments:
        if only_changes and a.action == "keep":
            continue
        node = nodes.get(a.node or "")
        rows.append(
            [
                a.pod,
                a.cluster,
                a.shard,
                a.role,
                a.node or "-",
                node.zone or "-" if node else "-",
                node.rack if node else "-",
                a.action if a.action != "move" else f"move from {a.from_node}",
            ]
        )
    parts = [_table(["POD", "CLUSTER", "SHARD", "ROLE", "NODE", "ZONE", "RACK", "ACTION"], rows)]
    parts.append(summary(plan))
    if plan.failovers:
        parts.append(
            "failovers:\n"
            + "\n".join(f"  {f.cluster}/{f.shard}: {f.from_} -> {f.to}" for f in plan.failovers)
        )
    if plan.unplaced:
        parts.append("unplaced:\n" + "\n".join(f"  {u.pod}: {u.reason}" for u in plan.unplaced))
    if plan.explanation:
        parts.append("why:\n" + "\n".join(f"  {line}" for line in plan.explanation))
    if plan.violations:
        parts.append(violations_table(plan.violations))
    if plan.skipped:
        parts.append(
            "input issues:\n"
            + "\n".join(f"  [{s.severity}] {s.object}: {s.message}" for s in plan.skipped)
        )
    return "\n\n".join(parts)


def summary(plan: Plan) -> str:
    hard = sum(1 for v in plan.violations if v.severity == "hard")
    soft = len(plan.violations) - hard
    worst = ", ".join(
        f"{d.level} {d.domain or '-'} takes {d.master_loss_ratio:.0%} of {d.cluster or '-'}'s masters"
        for d in plan.worst_domain_loss
    )
    lines = [
        f"status {plan.status}{' (degraded: ' + ', '.join(plan.broken_rules) + ')' if plan.degraded else ''}"
        f"  engine {plan.engine}"
        f"  objective {plan.objective:g}  bound {plan.bound:g}  gap {plan.gap:.2%}  {plan.solve_seconds:.2f}s",
        f"placed {sum(1 for a in plan.assignments if a.action == 'place' and a.node)}"
        f"  moved {sum(1 for a in plan.assignments if a.action == 'move')}"
        f"  failovers {len(plan.failovers)}  unplaced {len(plan.unplaced)}"
        f"  violations {hard} hard, {soft} soft",
    ]
    if worst:
        lines.append(f"worst single failure: {worst}")
    return "\n".join(lines)


def violations_table(violations: list[Violation]) -> str:
    rows = [
        [v.severity, v.rule, v.message]
        for v in sorted(violations, key=lambda v: (v.severity != "hard", v.rule))
    ]
    return _table(["SEVERITY", "RULE", "MESSAGE"], rows)


def topology_map(plan: Plan, snapshot: Snapshot) -> str:
    """zones > racks > nodes, each node with the shard members it will run (M = master, r = replica)."""
    on_node: dict[str, list[str]] = defaultdict(list)
    for a in plan.assignments:
        if a.node:
            mark = "M" if a.role == Role.MASTER.value else "r"
            on_node[a.node].append(f"{mark}:{a.cluster.split('/')[-1]}/{a.shard}")
    tree: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for node in snapshot.nodes:
        tree[node.zone or "(no zone)"][node.rack].append(node.name)
    lines = []
    for zone in sorted(tree):
        lines.append(f"zone {zone}")
        for rack in sorted(tree[zone]):
            lines.append(f"  rack {rack}")
            for name in sorted(tree[zone][rack]):
                members = " ".join(sorted(on_node.get(name, []))) or "."
                lines.append(f"    {name:<14} {members}")
    return "\n".join(lines)
