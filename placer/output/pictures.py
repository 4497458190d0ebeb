"""``-o map`` and ``-o html`` for plan, audit, rebalance and drill: which scenes each one draws."""

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from models.drill import DrillReport
from models.plan import DomainLoss, LevelVerdict, Plan, SkippedInput, Violation
from models.snapshot import Snapshot
from placer.output import html
from placer.output.render import (
    input_note,
    not_judged,
    summary,
    survival_lines,
    unlabelled_line,
)
from placer.output.topology import Mark, Scene, build_scene, text_maps

MAX_ROWS = 200
"""Rows of a table on the page; the rest are counted."""


def worst_mark(losses: Iterable[DomainLoss], snapshot: Snapshot) -> list[Mark]:
    """The worst zone failure (the worst rack failure when all nodes share one zone)."""
    by_level = {d.level: d for d in losses}
    zones = {n.zone for n in snapshot.nodes}
    loss = by_level.get("zone" if len(zones) > 1 else "rack")
    if (
        loss is None
        or loss.domain is None
        or (loss.master_loss_ratio == 0 and not loss.shards_lost)
    ):
        return []
    text = f"worst {loss.level} failure: {loss.master_loss_ratio:.0%} of {loss.cluster or '-'}'s masters"
    if loss.shards_lost:
        text += f", {loss.shards_lost} shard(s) lost"
    return [Mark(loss.level, loss.domain, text)]


def _violation_rows(violations: Sequence[Violation]) -> list[list[str]]:
    ordered = sorted(violations, key=lambda v: (v.severity != "hard", v.rule, v.message))
    return [[v.severity, v.rule, v.message] for v in ordered]


def _violations_html(
    title: str, violations: Sequence[Violation], verdicts: Sequence[LevelVerdict] = ()
) -> str:
    """The violations table; with none, "none" only when every survival level was judged."""
    if not violations:
        levels = not_judged(verdicts)
        if levels:
            lost = " or one ".join(levels)
            return f"<h3>{escape(title)}: none found; not judged: losing one {escape(lost)}</h3>"
        return f"<h3>{escape(title)}: none</h3>"
    rows = _violation_rows(violations)
    more = len(rows) - MAX_ROWS
    note = f"<p>and {more} more</p>" if more > 0 else ""
    return (
        f"<h3>{escape(title)}</h3>"
        + html.html_table(["severity", "rule", "message"], rows[:MAX_ROWS])
        + note
    )


def _render(
    fmt: str,
    title: str,
    scenes: list[Scene],
    lines: list[str],
    extra: Iterable[str] = (),
    skipped: Sequence[SkippedInput] = (),
) -> str:
    """The text map or the page; a report of an input with errors says it is incomplete (the
    errors and warnings themselves are on stderr, never in the picture)."""
    note = input_note(skipped)
    lines = [*lines, note] if note else lines
    if fmt == "map":
        return text_maps(scenes, [title, *lines])
    return html.page(title, scenes, lines, extra)


def _counts(violations: Sequence[Violation]) -> str:
    hard = sum(1 for v in violations if v.severity == "hard")
    return f"{hard} hard, {len(violations) - hard} soft violations"


def plan_picture(plan: Plan, snapshot: Snapshot, fmt: str, title: str = "redis-placer plan") -> str:
    scene = build_scene(
        snapshot,
        plan,
        "placement after the plan",
        marks=worst_mark(plan.worst_domain_loss, snapshot),
        caption=[
            _counts(plan.violations)
            + (f"; {len(plan.unplaced)} pod(s) unplaced (not drawn)" if plan.unplaced else "")
        ],
    )
    return _render(
        fmt,
        title,
        [scene],
        summary(plan).splitlines(),
        [_violations_html("violations after the plan", plan.violations, plan.survival)],
    )


def audit_picture(report: Plan, snapshot: Snapshot, fmt: str) -> str:
    scene = build_scene(
        snapshot,
        report,
        "running placement",
        marks=worst_mark(report.worst_domain_loss, snapshot),
        caption=[_counts(report.violations)],
    )
    pods = sum(1 for a in report.assignments if a.node)
    clusters = len({a.cluster for a in report.assignments})
    lines = [
        *survival_lines(report.survival),
        f"{len(snapshot.nodes)} nodes, {pods} running Redis pods in {clusters} Redis cluster(s); "
        + _counts(report.violations),
        *(line for line in summary(report).splitlines() if line.startswith("worst")),
    ]
    return _render(
        fmt,
        "redis-placer audit",
        [scene],
        lines,
        [_violations_html("violations", report.violations, report.survival)],
        report.skipped,
    )


def rebalance_picture(
    before: Plan,
    before_violations: Sequence[Violation],
    before_losses: Sequence[DomainLoss],
    after: Plan,
    snapshot: Snapshot,
    changes: Sequence[dict[str, Any]],
    fmt: str,
    skipped: Sequence[SkippedInput] = (),
    verdicts: Sequence[LevelVerdict] = (),
) -> str:
    """Before and after side by side, and the change list; ``verdicts`` say whether each level
    of the running placement could be judged."""
    left = build_scene(
        snapshot,
        before,
        "before: running placement",
        violations=before_violations,
        marks=worst_mark(before_losses, snapshot),
        caption=[_counts(before_violations)],
    )
    right = build_scene(
        snapshot,
        after,
        "after: the rebalance plan",
        marks=worst_mark(after.worst_domain_loss, snapshot),
        caption=[_counts(after.violations)],
    )
    steps = [
        f"{i}. failover shard {c['shard']}: promote {c['to']} over {c['from']}"
        if c["kind"] == "failover"
        else f"{i}. move {c['pod']}: evict from {c['from']} (target {c['to']})"
        for i, c in enumerate(changes, 1)
    ] or ["no changes needed"]
    lines = [
        *filter(None, map(unlabelled_line, verdicts)),
        f"plan {after.status}: objective {after.objective:g}, bound {after.bound:g}",
        f"{len(changes)} change(s)",
    ]
    if fmt == "map":
        return _render(fmt, "redis-placer rebalance", [left, right], [*lines, *steps], (), skipped)
    extra = [
        "<h3>changes</h3><ol>"
        + "".join(f"<li>{escape(s.split('. ', 1)[1])}</li>" for s in steps if ". " in s)
        + "</ol>"
        if changes
        else "<h3>no changes needed</h3>",
        _violations_html("violations before", before_violations, verdicts),
        _violations_html("violations after the plan", after.violations, verdicts),
    ]
    return _render(fmt, "redis-placer rebalance", [left, right], lines, extra, skipped)


def drill_picture(report: DrillReport, snapshot: Snapshot, plan: Plan | None, fmt: str) -> str:
    """The drilled placement with the worst failure's domain greyed out, and every failure listed."""
    from solver.check import keep_plan

    placement = plan or keep_plan(snapshot)
    worst = report.failures[0] if report.failures else None
    marks = [Mark(d.level, d.domain, "lost", kind="down") for d in worst.domains] if worst else []
    caption = []
    if worst is not None:
        hurt = [
            f"{c.cluster}: {c.masters_lost} of {c.masters} masters lost, majority "
            f"{'kept' if c.majority_kept else 'LOST'}, {c.shards_lost} shard(s) lost, state {c.state}"
            for c in worst.clusters
        ]
        caption = [f"worst failure: {worst.level} {worst.domain}", *hurt]
    scene = build_scene(
        snapshot,
        placement,
        f"{worst.level} {worst.domain} lost" if worst else "no failure drilled",
        violations=(),
        down=worst.nodes_lost if worst else (),
        marks=marks,
        caption=caption,
    )
    losing = sum(1 for f in report.failures if f.loses_data_or_majority)
    lines = [
        f"{len(report.failures)} failure(s) drilled, {losing} lose a shard or a master majority",
        f"promotion: {report.promotion_rule}",
        "slots: read from Redis" if report.slots == "redis" else "slots: not read",
    ]
    rows = []
    for f in report.failures:
        for c in f.clusters:
            rows.append(
                [
                    f"{f.level} {f.domain}",
                    c.cluster,
                    f"{c.masters_lost} of {c.masters}",
                    "kept" if c.majority_kept else "LOST",
                    str(c.shards_lost),
                    ", ".join(c.unavailable_shards),
                    ", ".join(f"{p.shard}: {p.to}" for p in c.promotions),
                    c.state,
                ]
            )
    table = html.html_table(
        [
            "failure",
            "cluster",
            "masters lost",
            "majority",
            "shards lost",
            "unavailable shards",
            "promotions",
            "state",
        ],
        rows[:MAX_ROWS],
        bad=5,
    )
    extra = ["<h3>every failure drilled</h3>", table]
    return _render(fmt, "redis-placer drill", [scene], lines, extra, report.skipped)
