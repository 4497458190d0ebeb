"""Planned disruptions, decided before they happen: may this Redis pod go now, must its master
role be handed over first (and to whom), or must it wait?

A drain, a node-pool upgrade or a rolling update stops pods one at a time. Redis Cluster keeps
serving through that only when a master is demoted before its pod stops (``CLUSTER FAILOVER``
moves the role with no data and no lost write) and when no shard loses its last serving member.
The replica that takes over is chosen so that, with every pod of the maintenance gone, any one
host's, rack's or zone's loss stays survivable, judged by the checker's own survival verdicts
(``solver.survival``), never by the CP-SAT encoding; where no choice keeps every level, the least
bad is taken and the verdict says so.

Pure: the placement is a snapshot whose roles are Redis's own, and what Kubernetes and Redis say
of each member's health comes in as ``MemberHealth``.
"""

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from models.cluster import Member, Role
from models.plan import LevelVerdict
from models.policy import Policy
from models.snapshot import Snapshot
from models.words import first_few, plural
from solver.check import keep_plan, survival_levels
from solver.survival import verdicts_for

__all__ = [
    "Disruption",
    "MaintenancePlan",
    "MemberHealth",
    "Successor",
    "choose_successor",
    "judge_disruption",
    "plan_maintenance",
]


class MemberHealth(NamedTuple):
    """What a member can do for its shard right now."""

    ready: bool
    """Kubernetes says Ready and the pod is not being deleted."""
    in_sync: bool
    """A replica: its link to the master is up and its offset close. A master: it serves."""
    offset: int = 0
    """Replication offset (a replica's), the rank Redis itself elects by."""


@dataclass(frozen=True)
class Successor:
    """The replica a master hands its role to, and what the placement survives afterwards."""

    pod: str
    verdicts: tuple[LevelVerdict, ...]

    @property
    def broken(self) -> tuple[str, ...]:
        """Levels whose one-domain loss would take something once the handover is done."""
        return tuple(v.level for v in self.verdicts if v.judged and not v.survived)


Kind = Literal["allow", "handover", "wait"]


@dataclass(frozen=True)
class Disruption:
    """The answer for one pod about to go."""

    pod: str
    kind: Kind
    reason: str
    successor: Successor | None = None
    shard: str | None = None
    first: str | None = None
    """A replica of the shard asked to go too, which goes before this master hands over (so
    the role is not handed to a pod about to stop, and back again)."""


def _serving(health: Mapping[str, MemberHealth], key: str) -> bool:
    h = health.get(key)
    return h is not None and h.ready and h.in_sync


def _without(snapshot: Snapshot, going: Collection[str], master: str, successor: str) -> Snapshot:
    """The placement once ``successor`` is master in ``master``'s place and the pods going are
    gone."""

    def swapped(m: Member) -> Member:
        if m.key == successor:
            return m.model_copy(update={"role": Role.MASTER})
        if m.key == master:
            return m.model_copy(update={"role": Role.REPLICA})
        return m

    members = tuple(swapped(m) for m in snapshot.members if m.key not in going)
    return snapshot.model_copy(update={"members": members})


def _badness(successor: Successor, policy: Policy, going: bool) -> tuple[int, int, int, int]:
    """Lower is better: the hard level kept first, then a replica that stays (one going soon
    hands the role on once more), then fewer levels broken, then fewer domains whose loss
    takes something."""
    hard = policy.rules.survive
    hard_broken = int(any(v.level == hard for v in successor.verdicts if not v.survived))
    takes = sum(len(v.takes) for v in successor.verdicts)
    return hard_broken, int(going), len(successor.broken), takes


def choose_successor(
    snapshot: Snapshot,
    policy: Policy,
    master: Member,
    going: Collection[str],
    health: Mapping[str, MemberHealth],
    *,
    strict: bool = False,
    unable: Collection[str] = (),
) -> Successor | None:
    """The serving replica of ``master``'s shard whose promotion leaves the most survivable
    placement, one outside ``going`` before one that will stop soon too (``strict``: never one
    of those); ties go to the highest replication offset, then the pod name. Never one of
    ``unable`` (Redis would not let it stand for election now). None when no replica of the
    shard is Ready and in sync."""
    shard = snapshot.shards.get(master.shard_key, [])
    candidates = [
        m
        for m in shard
        if m.key != master.key
        and m.key not in unable
        and not (strict and m.key in going)
        and m.role == Role.REPLICA
        and not m.pod.pending
        and _serving(health, m.key)
    ]
    if not candidates:
        return None
    scored = []
    for candidate in candidates:
        gone = (set(going) - {candidate.key}) | {master.key}
        after = _without(snapshot, gone, master.key, candidate.key)
        verdicts = verdicts_for(after, policy, keep_plan(after), {master.cluster})
        found = Successor(candidate.key, tuple(verdicts))
        rank = _badness(found, policy, candidate.key in going)
        scored.append(((*rank, -health[candidate.key].offset, candidate.key), found))
    return min(scored, key=lambda pair: pair[0])[1]


def _not_serving(
    shard: Iterable[Member], pod: str, health: Mapping[str, MemberHealth]
) -> list[str]:
    """The shard's other members that could not serve if ``pod`` went now. One that will stop
    later in the same maintenance still serves now: it waits its own turn."""
    out = []
    for m in shard:
        if m.key == pod:
            continue
        h = health.get(m.key)
        if m.pod.pending or h is None or not h.ready:
            out.append(f"{m.key} is not Ready")
        elif not h.in_sync:
            out.append(f"{m.key} is not in sync with its master")
    return out


def judge_disruption(
    snapshot: Snapshot,
    policy: Policy,
    pod: str,
    health: Mapping[str, MemberHealth],
    going: Collection[str] = (),
    handing_over: Collection[str] = (),
    asked: Collection[str] = (),
    cannot_stand: Mapping[str, str] | None = None,
    no_votes: Mapping[str, str] | None = None,
) -> Disruption:
    """May ``pod`` stop now? ``going``: the other pods the same maintenance will stop (a
    cordoned node's, a zone's), so a successor is never chosen among them. ``handing_over``:
    masters whose handover is asked for and not done; their replicas stay until it is (a
    failover in flight may be promoting them). ``asked``: other pods whose own stop was asked
    for and refused, still waiting to go (two StatefulSets rolled at once delete a master and
    its replica together).

    - a pod the policy does not manage, or a shard of one, goes (nothing to hand over);
    - while another member of its shard is not Ready, not in sync or going too, it waits;
    - a master hands its role over first; with no replica to take it, it waits;
    - a master whose best successor is itself asked to go waits for that replica to go and
      come back: handing the role to it would only hand it back when its stop comes;
    - Redis's election timers (``placer.redis.elections``), each pod with why:
      ``cannot_stand``, replicas that stood for election lately and may not stand again yet;
      ``no_votes``, masters replaced lately, whose replicas the other masters do not vote for
      yet. A master of ``no_votes``, or whose every serving replica cannot stand, waits,
      serving, rather than have its writes paused until then;
    - a replica goes."""
    member = next((m for m in snapshot.members if m.key == pod), None)
    if member is None or member.pod.pending:
        return Disruption(pod, "allow", "not a running Redis pod of the policy")
    shard = snapshot.shards.get(member.shard_key, [])
    key = member.shard_key
    if len(shard) == 1:
        return Disruption(pod, "allow", f"shard {key} has no replica to hand over to", shard=key)
    others_going = set(going) - {pod}
    blocked = _not_serving(shard, pod, health)
    if blocked:
        return Disruption(
            pod,
            "wait",
            f"shard {key} would lose its last serving member: {first_few(blocked, 2)}",
            shard=key,
        )
    if member.role != Role.MASTER:
        master = next((m.key for m in shard if m.role == Role.MASTER), None)
        if master is not None and master in handing_over:
            return Disruption(
                pod, "wait", f"its master {master} is handing shard {key} over first", shard=key
            )
        return Disruption(pod, "allow", f"a replica of shard {key}; its master serves", shard=key)
    leaving = set(asked) - {pod}
    if no_votes and pod in no_votes:
        return Disruption(pod, "wait", f"shard {key}: {no_votes[pod]}", shard=key)
    timers = cannot_stand or {}
    successor = choose_successor(
        snapshot, policy, member, others_going | leaving, health, unable=timers.keys()
    )
    if successor is None:
        later = [timers[m.key] for m in shard if m.key in timers and _serving(health, m.key)]
        if later:
            return Disruption(pod, "wait", f"shard {key}: {first_few(later, 2)}", shard=key)
        return Disruption(
            pod, "wait", f"no replica of shard {key} is Ready and in sync to take over", shard=key
        )
    if successor.pod in leaving:
        return Disruption(
            pod,
            "wait",
            f"{successor.pod} of shard {key} is to stop too: it goes first, then this master "
            "hands over to it",
            shard=key,
            first=successor.pod,
        )
    reason = f"master of shard {key}: hand over to {successor.pod} first"
    if successor.broken:
        reason += (
            f" (least bad choice: losing a {' or a '.join(successor.broken)} would still take "
            "something)"
        )
    return Disruption(pod, "handover", reason, successor=successor, shard=key)


@dataclass
class MaintenancePlan:
    """What stopping every Redis pod on some nodes would do, and the handovers that prepare it."""

    nodes: tuple[str, ...]
    handovers: list[Disruption] = field(default_factory=list)
    """Masters on those nodes, each with the replica that takes over, in the order to do them."""
    replicas: list[str] = field(default_factory=list)
    """Replicas on those nodes: they go once the handovers are done."""
    lost: list[str] = field(default_factory=list)
    """Why the maintenance would lose data or availability: a shard with every member there,
    a master with no replica elsewhere to take over."""
    waits: list[Disruption] = field(default_factory=list)
    """Pods that must wait for another member of their shard before they may go."""
    verdicts: list[LevelVerdict] = field(default_factory=list)
    """With those nodes' pods gone and the handovers done: survival of one more domain's loss."""

    @property
    def safe(self) -> bool:
        return not self.lost and not self.waits

    def summary(self) -> str:
        if self.lost:
            return f"NOT safe: {first_few(self.lost, 3)}"
        if self.waits:
            return f"not yet: {first_few([w.reason for w in self.waits], 2)}"
        return (
            f"safe: {plural(len(self.handovers), 'master')} to hand over, "
            f"{plural(len(self.replicas), 'replica')} to stop"
        )


def _majorities_lost(snapshot: Snapshot, lost_shards: set[str], lost: list[str]) -> list[str]:
    """Redis clusters left without a master majority by the masters that cannot be handed over
    (Redis then promotes no replica anywhere in them)."""
    unhanded = {line.split()[1] for line in lost if line.startswith("master ")}
    out = []
    masters: dict[str, list[Member]] = {}
    for m in snapshot.members:
        if m.role == Role.MASTER and not m.pod.pending:
            masters.setdefault(m.cluster, []).append(m)
    for cluster, ms in sorted(masters.items()):
        down = [m for m in ms if m.shard_key in lost_shards or m.key in unhanded]
        if down and 2 * (len(ms) - len(down)) <= len(ms):
            out.append(
                f"{cluster} keeps {len(ms) - len(down)} of {plural(len(ms), 'master')}, no majority"
            )
    return out


def plan_maintenance(
    snapshot: Snapshot,
    policy: Policy,
    nodes: Collection[str],
    health: Mapping[str, MemberHealth],
) -> MaintenancePlan:
    """Before ``nodes`` are drained together: what is handed over, in what order, and what would
    be lost. A successor is never one of the pods going, so nothing is handed over twice."""
    names = set(nodes)
    on_nodes = [m for m in snapshot.members if m.pod.node_name in names]
    going = {m.key for m in on_nodes}
    plan = MaintenancePlan(nodes=tuple(sorted(names)))
    lost_shards: set[str] = set()
    for key, shard in sorted(snapshot.shards.items()):
        running = [m for m in shard if not m.pod.pending]
        if running and all(m.key in going for m in running):
            lost_shards.add(key)
            plan.lost.append(f"shard {key} has every member on {first_few(sorted(names), 3)}")
    after = snapshot
    for member in sorted(on_nodes, key=lambda m: (m.pod.node_name or "", m.key)):
        if member.shard_key in lost_shards:
            continue
        if member.role != Role.MASTER:
            plan.replicas.append(member.key)
            continue
        shard = after.shards.get(member.shard_key, [])
        blocked = _not_serving(shard, member.key, health)
        if blocked:
            plan.waits.append(
                Disruption(
                    member.key,
                    "wait",
                    f"shard {member.shard_key}: {first_few(blocked, 2)}",
                    shard=member.shard_key,
                )
            )
            continue
        current = next(m for m in after.members if m.key == member.key)
        successor = choose_successor(after, policy, current, going, health, strict=True)
        if successor is None:
            plan.lost.append(
                f"master {member.key} has no replica off those nodes that is Ready and in sync"
            )
            continue
        plan.handovers.append(
            Disruption(
                member.key,
                "handover",
                f"hand shard {member.shard_key} over to {successor.pod}",
                successor=successor,
                shard=member.shard_key,
            )
        )
        after = _without(after, (), member.key, successor.pod)
    plan.lost.extend(_majorities_lost(snapshot, lost_shards, plan.lost))
    gone = after.model_copy(
        update={"members": tuple(m for m in after.members if m.key not in going)}
    )
    clusters = {m.cluster for m in on_nodes}
    if clusters and survival_levels(policy, snapshot.nodes):
        plan.verdicts = verdicts_for(gone, policy, keep_plan(gone), clusters)
    return plan
