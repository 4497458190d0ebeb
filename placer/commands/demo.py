"""``redis-placer demo``: the plan of a bundled example beside one pod at a time (the greedy
baseline and the stock kube-scheduler rules), and what losing each zone (each rack, when the
nodes are in one zone) does to each."""

import time
from importlib import resources
from typing import Any

import click

from models.drill import Failure
from models.plan import Plan
from models.policy import Level, Policy
from models.snapshot import Snapshot
from models.words import plural
from placer.commands.options import (
    StderrProgress,
    allow_empty_option,
    completed,
    finish,
    load_inputs,
    plan_exit_code,
    time_limit_option,
)
from placer.output.render import document
from placer.output.topology import topology_map
from solver.check import check_plan, evaluate_objective
from solver.drill import domains_at, drill, every_domain
from solver.greedy import greedy_plan
from solver.stock import stock_plan
from solver.survival import survival_verdicts

LEGEND = """\
greedy       this tool's baseline, one pod at a time; it balances each cluster's masters over
             zones, which kube-scheduler does not
stock rules  kube-scheduler's filters and scores, simulated, one pod at a time, with the rules
             people write: a shard's pods on different hosts (required), zones and racks
             (preferred); masters on different hosts, spread over zones (maxSkew 1, ScheduleAnyway)"""


def example_path() -> str:
    return str(resources.files("placer") / "examples" / "cluster.yaml")


def drill_level(snapshot: Snapshot) -> tuple[Level, str]:
    """The widest level with two domains or more, and why it is not zone ("" when it is).

    Losing the only zone loses everything, for every placement: a drill of it compares nothing
    (the summary's zone row already says NO), so the drill goes down a level and says why."""
    why: list[str] = []
    for level in ("zone", "rack"):
        domains = domains_at(snapshot, level)
        if len(domains) > 1:
            return level, _instead(why, level)
        why.append(
            f"one {level} only ({domains[0]}): losing it loses everything"
            if domains
            else f"no node has a {level} label"
        )
    return "host", _instead(why, "host")


def _instead(why: list[str], level: Level) -> str:
    return "; ".join([*why, f"each {level} lost in turn instead"]) if why else ""


def _losses(failure: Failure) -> list[str]:
    """What one failure takes from each Redis cluster that loses something, in a few words."""
    lost = []
    for c in failure.clusters:
        name = c.cluster.rpartition("/")[2]
        if not c.majority_kept:
            lost.append(f"{name}: {c.masters - c.masters_lost} of {c.masters} masters left")
        elif c.shards_lost:
            lost.append(f"{name}: {c.shards_lost} shard(s) gone")
    return lost


def _cell(failure: Failure | None) -> str:
    """One placement's fate in one failure, in a few words."""
    if failure is None:
        return "no Redis pod there"
    lost = _losses(failure)
    return "LOSES " + "; ".join(lost) if lost else "survives"


def _drilled(
    snapshot: Snapshot, plans: list[Plan], level: Level
) -> tuple[list[str], list[dict[str, Failure]]]:
    """The domains of ``level``, and for each placement what losing each of them does."""
    reports = [
        {f.domain: f for f in drill(snapshot, every_domain(snapshot, p, level), p).failures}
        for p in plans
    ]
    return sorted({d for r in reports for d in r}), reports


def _drills(level: Level, domains: list[str], reports: list[dict[str, Failure]]) -> list[list[str]]:
    """Rows: each domain of ``level`` lost in turn, and each placement's fate."""
    rows = [[f"{level} {d} lost", *(_cell(r.get(d)) for r in reports)] for d in domains]
    rows.append(["verdict", *(_verdict(list(r.values())) for r in reports)])
    return rows


def _verdict(failures: list[Failure]) -> str:
    """How many drilled failures lose something; no failure drilled is not "all survived"."""
    if not failures:
        return "nothing drilled"
    bad = sum(1 for f in failures if f.loses_data_or_majority)
    return f"{bad} of {len(failures)} lose" if bad else f"all {len(failures)} survived"


def _columns(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def _survival_cell(plan: Plan, level: str) -> str:
    for v in plan.survival:
        if v.level == level and not v.domains:
            return f"-: no {level} holds a pod"  # nothing judged is no "yes"
        if v.level == level:
            return (
                "yes"
                if v.survived
                else "NO: " + ", ".join(sorted({str(t.domain) for t in v.takes}))
            )
    return "-"


def _judged(snapshot: Snapshot, policy: Policy, plan: Plan) -> Plan:
    violations = check_plan(snapshot, policy, plan)
    return plan.model_copy(
        update={
            "violations": violations,
            "objective": evaluate_objective(snapshot, policy, plan).get("total", 0.0),
            "survival": survival_verdicts(snapshot, policy, plan),
        }
    )


PLACEMENTS = ("plan", "greedy", "stockRules")
"""The placements compared, as a document names them: the plan, greedy's, the stock rules'."""


def _survives(plan: Plan) -> dict[str, Any]:
    """Per level: whether losing any one domain keeps every shard and master majority (None:
    no domain of that level holds a pod), and the domains whose loss does not."""
    out: dict[str, Any] = {}
    for v in plan.survival:
        judged = bool(v.domains)
        out[v.level] = {
            "survives": v.survived if judged else None,
            "losing": sorted({str(t.domain) for t in v.takes}) if judged else [],
        }
    return out


def demo_document(
    header: dict[str, Any],
    plans: list[Plan],
    seconds: float,
    level: Level,
    instead: str,
    domains: list[str],
    reports: list[dict[str, Failure]],
) -> dict[str, Any]:
    """What the demo's table shows, as ``-o json`` and ``-o yaml`` print it."""
    pending = header["pending"]
    placements = {
        name: {
            "podsPlaced": pending - len(p.unplaced),
            "hardViolations": len(p.hard_violations),
            "survival": _survives(p),
            "objective": p.objective,
        }
        for name, p in zip(PLACEMENTS, plans, strict=True)
    }
    result = plans[0]
    placements["plan"].update({"status": result.status, "seconds": round(seconds, 2)})
    cannot = {v.level: list(v.cannot_survive) for v in result.survival if v.cannot_survive}
    failures = []
    for d in domains:
        row: dict[str, Any] = {"domain": d}
        for name, report in zip(PLACEMENTS, reports, strict=True):
            failure = report.get(d)
            lost = _losses(failure) if failure is not None else []
            row[name] = {"survives": None if failure is None else not lost, "loses": lost}
        failures.append(row)
    return {
        **header,
        "placements": placements,
        "cannotSurvive": cannot,
        "drill": {"level": level, "note": instead, "failures": failures},
        "plan": result.to_json_dict(),
    }


@click.command("demo", short_help="Plan a bundled example beside one pod at a time.")
@click.option(
    "-f",
    "--file",
    "file",
    type=str,
    metavar="FILE",
    default=None,
    help="Another snapshot to demo on (default: the bundled example).",
)
@allow_empty_option
@time_limit_option(default=10.0, help="Seconds for the solver.")
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "yaml"]),
    default="table",
    show_default=True,
    help="table: the comparison, the map of the plan and the drill; json or yaml: the same as "
    "a document, with the plan as plan -o json prints it.",
)
def command(file: str | None, allow_empty: bool, time_limit: float, output: str) -> None:
    """Plan a bundled example beside one pod at a time, and drill each zone's loss for all three.

    The plan (CP-SAT, the whole batch at once) is set beside the greedy baseline and the stock
    kube-scheduler rules (both one pod at a time), with the map of the plan and what losing each
    zone in turn does to each placement. With the nodes in one zone (or none labelled), losing
    it loses everything whatever the placement: each rack is lost in turn instead (each host,
    with one rack too), and the drill says so.
    """
    path = file or example_path()
    policy, snapshot = load_inputs(path, None, None, None, allow_empty)
    zones = len({n.zone for n in snapshot.nodes if n.zone is not None})
    clusters = len({m.cluster for m in snapshot.members})
    header = {
        "cluster": path if file else "placer/examples/cluster.yaml",
        "nodes": len(snapshot.nodes),
        "zones": zones,
        "redisClusters": clusters,
        "running": len(snapshot.running),
        "pending": len(snapshot.pending),
    }
    if output == "table":
        click.echo(
            f"cluster: {path if file else 'the bundled example (placer/examples/cluster.yaml)'}\n"
            f"  {plural(len(snapshot.nodes), 'node')} in {plural(zones, 'zone')}, "
            f"{plural(clusters, 'Redis cluster')}: "
            f"{len(snapshot.running)} Redis pods running, {len(snapshot.pending)} to place\n"
        )
    started = time.monotonic()
    with StderrProgress(started) as progress:
        result = solve_plan(snapshot, policy, time_limit, progress)
    seconds = time.monotonic() - started
    greedy = _judged(snapshot, policy, greedy_plan(snapshot, policy))
    stock = _judged(snapshot, policy, stock_plan(snapshot, policy))
    plans = [result, greedy, stock]
    level, instead = drill_level(snapshot)
    domains, reports = _drilled(snapshot, plans, level)
    if output != "table":
        data = demo_document(header, plans, seconds, level, instead, domains, reports)
        click.echo(document(data, output), nl=output == "json")
        finish(result.skipped, result.warnings, plan_exit_code(result))
    pending = len(snapshot.pending)
    rows = [
        ["", "plan (CP-SAT)", "greedy", "stock rules"],
        ["pods placed", *(f"{pending - len(p.unplaced)}/{pending}" for p in plans)],
        ["hard violations", *(str(len(p.hard_violations)) for p in plans)],
        *(
            [f"survives losing a {v.level}", *(_survival_cell(p, v.level) for p in plans)]
            for v in result.survival
        ),
        ["objective (lower is better)", *(f"{p.objective:g}" for p in plans)],
    ]
    click.echo(_columns(rows))
    click.echo(f"plan: {result.status}, {seconds:.2f}s")
    for v in result.survival:
        for note in v.cannot_survive:
            click.echo(f"no placement can survive losing a {v.level}: {note}")
    click.echo(f"{LEGEND}\n")
    click.echo("== the plan (M master, r replica) ==")
    click.echo(topology_map(result, snapshot))
    click.echo(f"\n== drill: each {level} lost in turn ==")
    if instead:
        click.echo(instead)
    click.echo(
        _columns(
            [["", "plan (CP-SAT)", "greedy", "stock rules"], *_drills(level, domains, reports)]
        )
    )
    finish(result.skipped, result.warnings, plan_exit_code(result))


def solve_plan(
    snapshot: Snapshot, policy: Policy, time_limit: float, progress: StderrProgress
) -> Plan:
    """The plan as ``plan`` makes it: solved, then completed with what the solver leaves."""
    from solver.solve import SolveOptions, solve

    result = solve(
        snapshot, policy, "place", SolveOptions(time_limit=time_limit, progress=progress)
    )
    return completed(snapshot, policy, result)
