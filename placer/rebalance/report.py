"""What a rebalance run says: the table for a person, why each hard violation stays, and the
gauges a Pushgateway gets."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from models.plan import LevelVerdict, SkippedInput, Violation
from models.snapshot import Snapshot
from placer.output import render
from solver.changes import Change

if TYPE_CHECKING:
    from placer.redis.roles import RoleReading

__all__ = ["print_table", "push_gauges", "with_reasons"]


def with_reasons(
    snapshot: Snapshot,
    plan: Any,
    after: list[Violation],
    whole: list[Violation],
    caps: tuple[int, int | None],
) -> list[dict[str, Any]]:
    """The violations the run's changes leave, each hard one with why it stays: the cap (the
    whole plan removes it), the repair's reason (no room, the rules), or the rules."""
    shard_of = {m.key: m.shard_key for m in snapshot.members}
    gone_in_whole = {(v.rule, tuple(v.pods)) for v in after} - {
        (v.rule, tuple(v.pods)) for v in whole
    }
    max_moves, max_failovers = caps
    limits = f"--max-moves {max_moves}" + (
        f", --max-failovers {max_failovers}" if max_failovers is not None else ""
    )
    rows = []
    for v in after:
        row = v.model_dump(by_alias=True)
        if v.severity == "hard":
            shards = [shard_of[p] for p in v.pods if p in shard_of]
            found = next((plan.stay_reasons[s] for s in shards if s in plan.stay_reasons), None)
            if (v.rule, tuple(v.pods)) in gone_in_whole:
                row["why"] = f"the cap: {limits}; the plan's changes left for later runs remove it"
            elif found is not None:
                row["why"] = found
            else:
                row["why"] = (
                    "the rules: no change found within the time limit removes it without "
                    "breaking another hard rule"
                )
        rows.append(row)
    return rows


def print_table(
    result: dict[str, Any],
    reading: RoleReading | None,
    before: list[Violation],
    changes: list[Change],
    remaining_hard: list[Violation],
    skipped: list[SkippedInput],
    caps: tuple[int, int | None],
    verdicts: Sequence[LevelVerdict] = (),
) -> None:
    """The report for a person: the audit, the changes of this run, and what they leave.
    ``verdicts`` say, when the audit found nothing, whether each level could be judged."""
    if reading is not None:
        click.echo(
            f"roles: from Redis ({len(reading.read)} of {len(reading.tried)} pods read"
            + (f", {len(reading.issues)} warnings on stderr" if reading.issues else "")
            + ")"
        )
        for mismatch in reading.mismatches:
            click.echo(f"  {mismatch.message}")
        if not reading.mismatches:
            click.echo("  every role label matches Redis")
        click.echo()
    if before:
        click.echo(render.violations_table(before))
    else:
        for line in filter(None, map(render.unlabelled_line, verdicts)):
            click.echo(line)
        click.echo(f"audit: {render.no_violations(verdicts)}")
    click.echo()
    for i, c in enumerate(changes, 1):
        if c["kind"] == "failover":
            click.echo(f"{i}. failover  shard {c['shard']}: promote {c['to']} over {c['from']}")
        else:
            click.echo(f"{i}. move      {c['pod']}: evict from {c['from']} (target {c['to']})")
    left_out = result["changesLeftOut"]
    if left_out:
        max_moves, max_failovers = caps
        limits = f"--max-moves {max_moves}" + (
            f", --max-failovers {max_failovers}" if max_failovers is not None else ""
        )
        click.echo(f"{_count(len(left_out), 'planned change')} left for later runs ({limits})")
    broken = result.get("survivalBroken") or []
    for row in broken:
        click.echo(
            f"survival broken: losing one {row['level']} would take something "
            f"({row['severity']}): {'; '.join(row['takes'][:3])}"
        )
        click.echo(f"  to mend: {row['mend']}")
    if not changes and not remaining_hard and not broken:
        click.echo("no changes needed")
    elif remaining_hard:
        where = " in the cluster" if "actions" in result else ""
        when = "after these changes" if changes else "no change planned"
        remain = "remains" if len(remaining_hard) == 1 else "remain"
        click.echo(f"{when}: {_count(len(remaining_hard), 'hard violation')} {remain}{where}")
        click.echo(render.violations_table(remaining_hard))
        if "actions" not in result:
            whys = Counter(row["why"] for row in result["violationsAfterPlan"] if row.get("why"))
            for why, count in whys.most_common(8):
                click.echo(f"  why ({count}): {why}")
            if len(whys) > 8:
                click.echo(f"  ({len(whys) - 8} more reasons: -o json lists each)")
    note = render.input_note(skipped)
    if note:
        click.echo(note)
    if "notApplied" in result:
        click.echo(f"\nnot applied: {result['notApplied']}")
    else:
        click.echo(
            f"\n{'applied' if result['apply'] else 'dry run: pass --apply to perform these changes'}"
        )
    for action in result.get("actions", []):
        click.echo(
            f"  {action['kind']} {action['target']}: {action['outcome']} {action.get('reason', '')}"
        )


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


def push_gauges(
    url: str,
    before: list[Any],
    remaining: list[Any],
    broken: Sequence[Mapping[str, Any]] = (),
) -> None:
    from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

    registry = CollectorRegistry()
    gauge = Gauge(
        "redis_placer_violations",
        "Violations of the placement",
        ["rule", "severity"],
        registry=registry,
    )
    for v in before:
        gauge.labels(v.rule, v.severity).inc()
    Gauge(
        "redis_placer_rebalance_remaining_hard_violations",
        "Hard violations left",
        registry=registry,
    ).set(len(remaining))
    survival = Gauge(
        "redis_placer_survival_broken",
        "1 while losing one domain at this level would take a shard or a master majority",
        ["level"],
        registry=registry,
    )
    for level in ("host", "rack", "zone"):
        survival.labels(level).set(1 if any(b["level"] == level for b in broken) else 0)
    push_to_gateway(url, job="redis-placer-rebalance", registry=registry)
