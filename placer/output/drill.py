"""A failure drill as text: one block per failure, worst first."""

from models.drill import ClusterOutcome, DrillReport, Failure
from models.words import first_few
from placer.output.render import input_note, table


def _indented(headers: list[str], rows: list[list[str]]) -> str:
    return "\n".join(f"  {line}" for line in table(headers, rows).splitlines())


def _zones(counts: dict[str, int]) -> str:
    return " ".join(f"{zone or '-'}:{n}" for zone, n in counts.items()) or "none"


def _unavailable(c: ClusterOutcome) -> str:
    if not c.unavailable_shards:
        return "-"
    shards = ",".join(c.unavailable_shards)
    return f"{shards} ({c.slots_unavailable} slots)" if c.slots_unavailable is not None else shards


def _verdict(c: ClusterOutcome) -> str:
    if not c.majority_kept:
        return "LOST"
    return "kept"


def failure_block(failure: Failure) -> str:
    nodes = failure.nodes_lost
    shown = first_few(nodes, 4)
    head = f"{failure.level} {failure.domain} ({len(nodes)} node{'s' * (len(nodes) != 1)}: {shown})"
    if not failure.clusters:
        return f"{head}: no Redis pod there"
    bad = [c.cluster for c in failure.clusters if c.shards_lost or not c.majority_kept]
    head += f": LOSES {', '.join(bad)}" if bad else ": every Redis cluster survives"
    rows = [
        [
            c.cluster,
            f"{c.masters_lost} of {c.masters}",
            _verdict(c),
            f"{c.shards_lost} of {c.shards}",
            _unavailable(c),
            c.state,
            _zones(c.masters_per_zone),
        ]
        for c in failure.clusters
    ]
    lines = [
        head,
        _indented(
            [
                "CLUSTER",
                "MASTERS LOST",
                "MAJORITY",
                "SHARDS LOST",
                "UNAVAILABLE",
                "STATE",
                "MASTERS PER ZONE AFTER",
            ],
            rows,
        ),
    ]
    for c in failure.clusters:
        for p in c.promotions:
            offset = f" (offset {p.offset})" if p.offset is not None else ""
            lines.append(
                f"  promote {c.cluster} shard {p.shard}: {p.to}{offset} replaces {p.from_}"
            )
        for s in c.affected_shards:
            if not s.available:
                lines.append(f"  down    {c.cluster} shard {s.shard}: {s.reason}")
    return "\n".join(lines)


def drill_text(report: DrillReport, level_checked: str | None) -> str:
    placement = "a plan's placement" if report.placement == "plan" else "the running placement"
    if report.placement_note:
        placement += f" ({report.placement_note})"
    lines = [
        f"drill of {placement}: {report.members} Redis pods; roles from {report.roles}",
        f"promotion: {report.promotion_rule}",
        "slots: read from Redis"
        if report.slots == "redis"
        else "slots: not read (pass --roles redis); unavailable shards are counted instead",
    ]
    if report.left_out:
        lines.append(
            f"not drilled: {len(report.left_out)} pod(s) with no node"
            + (
                " (pass --plan to drill a plan)"
                if report.placement == "running" and not report.placement_note
                else ""
            )
        )
    if report.unlabelled:
        n = len(report.unlabelled)
        lines.append(
            f"{level_checked} unknown: {'node' if n == 1 else 'nodes'} "
            f"{first_few(report.unlabelled, 5)} {'holds' if n == 1 else 'hold'} Redis pods and "
            f"{'lacks' if n == 1 else 'lack'} the {level_checked} label: no {level_checked}'s "
            "loss below counts them, so one that survives here may not"
        )
    parts = ["\n".join(lines)]
    parts += [failure_block(f) for f in report.failures]
    losing = [f for f in report.failures if f.loses_data_or_majority]
    what = f"{level_checked} failures" if level_checked else "failures drilled"
    if not report.failures:
        level = level_checked or "domain"
        parts.append(
            f"verdict: nothing drilled: no {level} holds a Redis pod of this placement"
            + (f" (the nodes they run on lack the {level} label)" if report.members else "")
        )
    elif losing:
        parts.append(
            f"verdict: {len(losing)} of {len(report.failures)} {what} lose a shard or a "
            "master majority"
        )
    else:
        parts.append(
            f"verdict: every one of the {len(report.failures)} {what} keeps every shard and "
            "each cluster's master majority"
        )
    note = input_note(report.skipped)
    return "\n\n".join(parts) + (f"\n{note}" if note else "")
