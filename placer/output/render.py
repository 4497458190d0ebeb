"""Plans and audits as text: tables for people, JSON and YAML for tools."""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from models import json_text
from models.plan import LevelVerdict, Plan, SkippedInput, Violation
from models.snapshot import Snapshot
from models.words import first_few, plural, verb


def as_document(plan: Plan, fmt: str) -> str:
    return document(plan.to_json_dict(), fmt)


SOLVE_FIELDS = ("status", "engine", "degraded", "bound", "gap", "unplacedBound", "solveSeconds")
"""What only a solve can say: an audit's document leaves them out (it solves nothing)."""


def audit_document(report: Plan, fmt: str) -> str:
    """An audit as a document: the plan's fields that judge a placement, ``solved: false``, and
    none that a solve would fill (no status, engine or bound: nothing was solved)."""
    data = {k: v for k, v in report.to_json_dict().items() if k not in SOLVE_FIELDS}
    return document({"solved": False, **data}, fmt)


def document(data: Mapping[str, Any], fmt: str) -> str:
    """A report as ``-o json`` (indented) or ``-o yaml`` (keys in their order) prints it."""
    if fmt == "json":
        return json_text.dumps_indented(data)
    return yaml.safe_dump(dict(data), sort_keys=False)


def table(headers: list[str], rows: list[list[str]]) -> str:
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
    unplaced = {u.pod for u in plan.unplaced}
    rows = []
    for a in plan.assignments:
        if only_changes and a.action == "keep":
            continue
        placed = a.pod not in unplaced and a.node is not None
        node = nodes.get(a.node or "") if placed else None
        if a.pod in unplaced:
            action = "unplaced"
        elif a.action == "move":
            action = f"move from {a.from_node}"
        else:
            action = a.action
        rows.append(
            [
                a.pod,
                a.cluster,
                a.shard,
                a.role,
                (a.node or "-") if placed else "-",
                node.zone or "-" if node else "-",
                node.rack if node else "-",
                action,
            ]
        )
    parts = [table(["POD", "CLUSTER", "SHARD", "ROLE", "NODE", "ZONE", "RACK", "ACTION"], rows)]
    parts.append(summary(plan))
    if plan.failovers:
        parts.append(
            "failovers:\n"
            + "\n".join(f"  {f.cluster}/{f.shard}: {f.from_} -> {f.to}" for f in plan.failovers)
        )
    if plan.unplaced:
        parts.append("unplaced:\n" + "\n".join(f"  {line}" for line in unplaced_lines(plan)))
    if plan.explanation:
        parts.append("why:\n" + "\n".join(f"  {line}" for line in plan.explanation))
    if plan.violations:
        parts.append(violations_table(plan.violations))
    return "\n\n".join(parts)


def unplaced_lines(plan: Plan) -> list[str]:
    """One line per cause, with how many pods it holds back: 26,100 pods refused for one reason
    are one line, not 26,100.

    A reason that starts with another pod's name (the member of the shard that no node takes)
    is grouped by what follows it: that is the cause, whichever pod of which shard carries it.
    """
    pods = {a.pod for a in plan.assignments}

    def cause(reason: str) -> str:
        first, sep, rest = reason.partition(": ")
        return rest if sep and first in pods else reason

    return grouped(((u.pod, cause(u.reason)) for u in plan.unplaced), noun="pods")


def grouped(pairs: Iterable[tuple[str, str]], noun: str = "", shown: int = 3) -> list[str]:
    """(subject, text) pairs as one line per distinct text, in first-seen order.

    A text with one subject reads ``subject: text``; with more, ``N nouns: text (a, b, c and
    N-3 more)``. Subjects such as ``pod ns/name`` give the noun themselves (``pods``).
    """
    by_text: dict[str, dict[str, None]] = {}  # ordered sets: the same thing said twice is once
    for subject, text in pairs:
        by_text.setdefault(text, {})[subject] = None
    lines: list[str] = []
    for text, unique in by_text.items():
        subjects = list(unique)
        if len(subjects) == 1:
            lines.append(f"{subjects[0]}: {text}")
            continue
        kinds = {s.partition(" ")[0] for s in subjects}
        names = subjects
        plural = noun or "objects"
        if not noun and len(kinds) == 1 and all(" " in s for s in subjects):
            plural = f"{kinds.pop()}s"
            names = [s.partition(" ")[2] for s in subjects]
        listed = first_few(names, shown)
        lines.append(f"{len(subjects)} {plural}: {text} ({listed})")
    return lines


def issue_lines(skipped: Sequence[SkippedInput], warnings: Sequence[str] = ()) -> list[str]:
    """Input issues and warnings as ``error:`` / ``warning:`` lines, errors first, one per cause."""
    lines: list[str] = []
    for severity in ("error", "warning"):
        pairs = [(s.object, s.message) for s in skipped if s.severity == severity]
        lines.extend(f"{severity}: {line}" for line in grouped(pairs))
    lines.extend(f"warning: {text}" for text in warnings)
    return lines


def summary(plan: Plan) -> str:
    hard = sum(1 for v in plan.violations if v.severity == "hard")
    soft = len(plan.violations) - hard
    lines = [
        f"status {plan.status}{' (degraded: ' + ', '.join(plan.broken_rules) + ')' if plan.degraded else ''}"
        f"  engine {plan.engine}"
        f"  objective {plan.objective:g}  bound {plan.bound:g}  gap {plan.gap:.2%}  {plan.solve_seconds:.2f}s",
        f"placed {sum(1 for a in plan.assignments if a.action == 'place' and a.node)}"
        f"  moved {sum(1 for a in plan.assignments if a.action == 'move')}"
        f"  failovers {len(plan.failovers)}  unplaced {len(plan.unplaced)}"
        f"  violations {hard} hard, {soft} soft",
        *survival_lines(plan.survival),
        worst_failure(plan),
        input_note(plan.skipped),
    ]
    return "\n".join(line for line in lines if line)


def audit_summary(plan: Plan) -> str:
    """The audit's summary: what runs and what is wrong with it. No solver ran: no status."""
    hard = sum(1 for v in plan.violations if v.severity == "hard")
    running = sum(1 for a in plan.assignments if a.node)
    lines = [
        f"running {running}  pending {len(plan.assignments) - running}"
        f"  violations {hard} hard, {len(plan.violations) - hard} soft"
        f"  objective {plan.objective:g}",
        worst_failure(plan),
        input_note(plan.skipped),
    ]
    return "\n".join(line for line in lines if line)


def unlabelled_line(v: LevelVerdict) -> str:
    """The nodes whose domain at this level is unknown, named as the cause; "" when none."""
    if not v.unlabelled:
        return ""
    n = len(v.unlabelled)
    names = first_few(v.unlabelled, 5)
    running = len(v.unlabelled_running)
    if running == n:
        held = " (it holds Redis pods)" if n == 1 else f" (all {n} hold Redis pods)"
    elif running:
        held = (
            f" ({first_few(v.unlabelled_running, 3)} {verb(running, 'holds', 'hold')} Redis pods)"
        )
    else:
        held = ""
    return (
        f"{v.level} unknown: {'node' if n == 1 else 'nodes'} {names} "
        f"{verb(n, 'lacks', 'lack')} the {v.level} label {v.label!r}{held}: "
        f"label {'it' if n == 1 else 'each'} with its {v.level}"
    )


def not_judged(verdicts: Sequence[LevelVerdict]) -> list[str]:
    """The levels whose survival could not be judged: a report never calls them healthy."""
    return [v.level for v in verdicts if not v.judged]


def no_violations(verdicts: Sequence[LevelVerdict]) -> str:
    """What a report with no violation says: "no violations" only when every level was judged."""
    levels = not_judged(verdicts)
    if not levels:
        return "no violations"
    return f"no violations found; not judged: losing one {' or one '.join(levels)}"


def survival_lines(verdicts: Sequence[LevelVerdict]) -> list[str]:
    """The survival verdict, one line per level (and one per cluster no placement could keep);
    nodes without a level's label first, as the cause of what cannot be judged."""
    lines = [line for line in map(unlabelled_line, verdicts) if line]
    for v in verdicts:
        head = f"survives losing one {v.level}:"
        if v.unlabelled_running and not v.judged:
            running = len(v.unlabelled_running)
            where = (
                f"no loss among the {plural(v.domains, v.level)} known, but " if v.domains else ""
            )
            lines.append(
                f"{head} not judged: {where}Redis pods run on "
                f"{plural(running, 'node')} without the {v.level} label (above)"
            )
        elif v.lost_already:
            lines.append(
                f"{head} NO: lost already, before any failure: {'; '.join(v.lost_already)}"
            )
            if v.takes:
                lines.append(f"  and beyond that: {takes_text(v)}")
        elif not v.judged:
            lines.append(f"{head} nothing to judge: no Redis pod is on a node of the snapshot")
        elif v.survived:
            noun = v.level if v.domains == 1 else f"{v.level}s"
            lines.append(f"{head} yes (each of {v.domains} {noun} with Redis pods)")
        else:
            finding = "hard violation" if v.severity == "hard" else "soft finding"
            lines.append(f"{head} NO ({finding}): {takes_text(v)}")
        lines.extend(f"  no placement can: {note}" for note in v.cannot_survive)
    return lines


def takes_text(verdict: LevelVerdict, shown: int = 2) -> str:
    """Which domain takes which cluster's majority or shards, the first ``shown`` of them."""
    parts = []
    for t in verdict.takes:
        what = []
        if t.majority_lost:
            what.append(f"{t.cluster}'s master majority ({t.masters_left} of {t.masters} left)")
        if t.shards_lost:
            listed = ", ".join(t.shards_lost[:3]) + ("..." if len(t.shards_lost) > 3 else "")
            noun = "shards" if len(t.shards_lost) > 1 else "shard"
            what.append(f"every member of {t.cluster} {noun} {listed}")
        parts.append(f"{verdict.level} {t.domain} takes {' and '.join(what)}")
    text = "; ".join(parts[:shown])
    if len(parts) > shown:
        more = len(parts) - shown
        text += f"; and {more} more" if more > 1 else f"; and {more} more like it"
    return text


def input_note(skipped: Sequence[SkippedInput]) -> str:
    """A report over untrusted input says so, so that it never reads as healthy."""
    errors = sum(1 for s in skipped if s.severity == "error")
    if not errors:
        return ""
    return f"input errors: {errors}, on stderr: this report is incomplete"


def worst_failure(plan: Plan) -> str:
    worst = ", ".join(
        f"{d.level} {d.domain} takes {d.master_loss_ratio:.0%} of {d.cluster}'s masters"
        for d in plan.worst_domain_loss
        if d.cluster is not None and d.domain is not None
    )
    return f"worst single failure: {worst or 'none (no masters placed)'}"


def violations_table(violations: list[Violation]) -> str:
    rows = [
        [v.severity, v.rule, v.message]
        for v in sorted(violations, key=lambda v: (v.severity != "hard", v.rule))
    ]
    return table(["SEVERITY", "RULE", "MESSAGE"], rows)
