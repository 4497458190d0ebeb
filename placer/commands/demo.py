"""``redis-placer demo``: the plan of a bundled example beside one pod at a time (the greedy
baseline and the stock kube-scheduler rules), and what losing each zone (each rack, when the
nodes are in one zone) does to each."""

import time
from importlib import resources

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


def _cell(failure: Failure | None) -> str:
    """One placement's fate in one failure, in a few words."""
    if failure is None:
        return "no Redis pod there"
    lost = []
    for c in failure.clusters:
        name = c.cluster.rpartition("/")[2]
        if not c.majority_kept:
            lost.append(f"{name}: {c.masters - c.masters_lost} of {c.masters} masters left")
        elif c.shards_lost:
            lost.append(f"{name}: {c.shards_lost} shard(s) gone")
    return "LOSES " + "; ".join(lost) if lost else "survives"


def _drills(snapshot: Snapshot, plans: list[Plan], level: Level) -> list[list[str]]:
    """Rows: each domain of ``level`` lost in turn, and each placement's fate."""
    reports = [
        {f.domain: f for f in drill(snapshot, every_domain(snapshot, p, level), p).failures}
        for p in plans
    ]
    domains = sorted({d for r in reports for d in r})
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


@click.command("demo", short_help="Plan a bundled example beside one pod at a time.")
@click.option(
    "-f",
    "--file",
    "file",
    type=str,
    default=None,
    help="Another snapshot to demo on (default: the bundled example).",
)
@allow_empty_option
@time_limit_option(default=10.0, help="Seconds for the solver.")
def command(file: str | None, allow_empty: bool, time_limit: float) -> None:
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
    level, instead = drill_level(snapshot)
    click.echo(f"\n== drill: each {level} lost in turn ==")
    if instead:
        click.echo(instead)
    click.echo(
        _columns([["", "plan (CP-SAT)", "greedy", "stock rules"], *_drills(snapshot, plans, level)])
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
