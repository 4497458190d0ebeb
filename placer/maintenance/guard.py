"""The maintenance guard: planned disruptions of Redis pods wait for a handover, never take a
shard's last serving member, and the spread is restored as soon as the pods are back.

Three jobs, kept apart as controller-runtime keeps watching, deciding and acting apart:

- ``admit`` answers the admission webhook for an eviction or a delete of a managed pod, from a
  reading at most a second old: let it through, or refuse it with HTTP 429 (``kubectl drain``,
  the autoscalers and the StatefulSet controller retry) while a handover is due or another
  member of the shard is not serving. A pod held longer than ``max_hold_s`` is let through with a
  warning and an Event: a drain never hangs on the guard. Any replica answers; it records the
  handover it wants on the pod (``redis-placer.io/handover-requested``) for the leader.
- ``step`` (the leader only) acts: hands over the masters that are asked for or that sit on
  cordoned or disruption-tainted nodes, one shard at a time, relabels roles Redis contradicts,
  and, when nothing is going and every member serves, makes the failovers that restore the
  spread (a rebalance solve with moves off).
- the reading (placer.maintenance.reading; nodes, pods and StatefulSets from ``objects``: the
  binder's watch cache in its process, lists elsewhere) and the decisions (solver.handover) are
  the others'.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from models.cluster import Member, Role
from models.maintenance import going_reason
from models.policy import Policy
from placer.kube.objects import read_utc_stamp, utc_stamp
from placer.kube.source import ObjectSource
from placer.maintenance.reading import GuardView, masters_on, read_guard_view
from placer.redis import elections
from placer.redis.elections import FAILOVER_UNTIL
from placer.redis.ops import FailoverResult, RedisEndpoint, RedisOpsError, failover_to
from solver.handover import Disruption, MemberHealth, judge_disruption

log = logging.getLogger(__name__)

HANDOVER_ANNOTATION = "redis-placer.io/handover-requested"
STOP_ASKED_ANNOTATION = "redis-placer.io/stop-asked"
"""On a pod whose eviction or delete was refused: when (UTC), so every replica of the guard
knows the pod is waiting to stop and hands its shard's master role to no pod about to go."""
COMPONENT = "redis-placer-guard"
DEFAULT_MAX_HOLD_S = 120.0
DEFAULT_REFRESH_S = 2.0
ADMIT_MAX_AGE_S = 1.0
RESTORE_EVERY_S = 30.0
HOLD_FORGOTTEN_S = 600.0
"""Silence after which a refused pod's hold is forgotten. Every retrier seen holds on well
inside it (kubectl drain every 5 s; the StatefulSet controller at once on its pods' changes,
and its backoff passes a minute only after the longest hold has let the pod go)."""
WANTED_LOCAL_S = 5.0
ASKED_FRESH_S = 60.0
"""A refused stop counts as still wanted this long after it was last asked for (drains retry
every few seconds; a StatefulSet's rollout at once on any change of its pods)."""
ASKED_STAMP_EVERY_S = 10.0
LET_GO_S = 30.0
"""A pod let go counts as gone this long, until the reading shows it deleted: the reading may be
a second old, and another member's stop asked for meanwhile must not find it serving."""


@dataclass(frozen=True)
class Admission:
    """The webhook's answer for one eviction or delete."""

    allowed: bool
    message: str = ""
    code: int = 200
    warnings: tuple[str, ...] = ()


Failover = Callable[..., FailoverResult]
Reader = Callable[..., GuardView]


class Guard:
    """Shared by the webhook's threads and the acting loop; every field behind one lock."""

    def __init__(
        self,
        adapter: Any,
        policy: Policy,
        *,
        port: int,
        metrics: Any = None,
        max_hold_s: float = DEFAULT_MAX_HOLD_S,
        refresh_s: float = DEFAULT_REFRESH_S,
        failover_timeout_s: float = 30.0,
        restore: bool = True,
        read: Reader = read_guard_view,
        objects: ObjectSource | None = None,
        failover: Failover = failover_to,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.adapter = adapter
        self.objects = objects
        """Where nodes, pods and StatefulSets are read from: None lists them at every reading;
        in the binder's process, its watch cache (``placer.binder.shared``)."""
        self.policy = policy
        self.port = port
        self.metrics = metrics
        self.max_hold_s = max_hold_s
        self.refresh_s = refresh_s
        self.failover_timeout_s = failover_timeout_s
        self.restore = restore
        self._read = read
        self._failover = failover
        self._clock = clock
        self._wall = wall_clock
        """Seconds since the epoch: what times written on the pods are read against."""
        self._lock = threading.Lock()
        self._reading = threading.Lock()
        self._view: GuardView | None = None
        self._held: dict[str, tuple[float, float]] = {}
        """Pods refused (dry runs aside), by when their hold began and when they were last
        refused. A request after ``HOLD_FORGOTTEN_S`` of silence starts a new hold: a pod refused
        long ago (a drain given up) is not let through unchecked as "held too long"."""
        self._asked_at: dict[str, tuple[float, str]] = {}
        """Pods whose stop this replica refused: when last, and the pod's uid then."""
        self._let_go: dict[str, tuple[float, str]] = {}
        """Pods this replica let stop: when, and the pod's uid then."""
        self._failing_over: dict[str, str] = {}
        """Shards whose failover this replica has under way (``master -> successor``): a reading
        from before it holds the old roles, so no member of theirs is let stop meanwhile."""
        self._stood: dict[str, float] = {}
        """Pods that stood for election in one of this replica's failovers: until when (the
        wall's clock) Redis lets them not stand again (``placer.redis.elections``; the pods
        carry it too, for the others, unless that write failed)."""
        self._replaced: dict[str, float] = {}
        """Masters replaced in one of this replica's failovers: until when the masters vote
        about them not, likewise."""
        self._wanted: dict[str, float] = {}
        """Handovers this replica asked for, and when: trusted alone only until the readings
        carry the request on the pod (the leader clears it there when it is done or dropped)."""
        self._told: dict[tuple[str, str], float] = {}
        self._last_restore = -RESTORE_EVERY_S
        self.wake = threading.Event()
        self.last_error = ""

    # -- reading -----------------------------------------------------------------------------

    def refresh(self) -> GuardView | None:
        """Read the cluster and Redis now; None (and ``last_error``) when the cluster cannot be
        read (a list fails; from the binder's cache: it is unreadable and a list fails too)."""
        try:
            view = self._read(self.adapter, self.policy, port=self.port, objects=self.objects)
        except Exception as exc:  # the API server is away: keep the last view, say why
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("guard: cannot read the cluster: %s", self.last_error)
            return None
        view = replace(view, read_at=self._clock())  # its age is told by the guard's clock
        with self._lock:
            self._view = view
            self.last_error = ""
        for problem in view.problems:
            log.info("guard: %s", problem)
        return view

    def current(self, max_age: float = ADMIT_MAX_AGE_S) -> GuardView | None:
        """A view no older than ``max_age``; concurrent callers share one reading."""
        view = self._view
        if view is not None and self._clock() - view.read_at <= max_age:
            return view
        with self._reading:
            view = self._view
            if view is not None and self._clock() - view.read_at <= max_age:
                return view
            return self.refresh()

    # -- deciding (the webhook) ----------------------------------------------------------------

    def _count(self, decision: str) -> None:
        if self.metrics is not None:
            self.metrics.guard_admissions.labels(decision=decision).inc()

    def admit(self, namespace: str, name: str, *, dry_run: bool = False) -> Admission:
        """Whether an eviction or delete of ``namespace/name`` may go ahead now."""
        key = f"{namespace}/{name}"
        view = self.current()
        if view is None:
            return Admission(
                True,
                warnings=("redis-placer guard cannot read the cluster: let through unchecked",),
            )
        member = next((m for m in view.snapshot.members if m.key == key), None)
        if member is None and key not in view.deleting:
            skipped = next((m for m in view.snapshot.skipped_members if m.key == key), None)
            if skipped is not None:  # a pod of the policy it cannot judge: said, not silent
                self._count("unjudged")
                text = f"redis-placer guard: {key} let through unchecked: {_why_skipped(view, skipped)}"
                log.warning("guard: %s", text.removeprefix("redis-placer guard: "))
                return Admission(True, warnings=(text,))
        if member is None or key in view.deleting:
            return Admission(True)
        with self._lock:
            under_way = self._failing_over.get(member.shard_key)
        if under_way is not None:
            return self._refuse(
                view,
                key,
                Disruption(key, "wait", f"shard {member.shard_key} is failing over ({under_way})"),
                dry_run,
            )
        elsewhere, stale = self._failovers_marked(view, member)
        if elsewhere:  # another replica's, or a rebalance's
            reason = f"shard {member.shard_key} is failing over: {elsewhere}"
            return self._refuse(view, key, Disruption(key, "wait", reason), dry_run)
        if stale:  # a failover ended since this reading: its roles are the old ones
            with self._reading:
                fresh = self.refresh()
            if fresh is not None:
                view = fresh
                found = next((m for m in view.snapshot.members if m.key == key), None)
                if found is None or key in view.deleting:
                    return Admission(True)
                member = found
        going = view.going_pods() | {key}
        decision = judge_disruption(
            view.snapshot,
            self.policy,
            key,
            self._health(view),
            going,
            self._handing_over(view),
            self._stops_asked(view, but=key),
            *self._timers(view),
        )
        if decision.kind == "allow":
            with self._lock:
                self._held.pop(key, None)
            if not dry_run:
                self._let(view, key)
            self._count("allow")
            return Admission(True, message=decision.reason)
        return self._refuse(view, key, decision, dry_run)

    def _refuse(self, view: GuardView, key: str, decision: Disruption, dry_run: bool) -> Admission:
        """HTTP 429 for ``decision``, unless ``key`` was held its longest already."""
        now = self._clock()
        with self._lock:
            began, last = self._held.get(key, (now, now))
            if now - last > HOLD_FORGOTTEN_S:
                began = now
            if not dry_run:
                self._held[key] = (began, now)
        held = now - began
        if held >= self.max_hold_s:
            with self._lock:
                self._held.pop(key, None)
            if not dry_run:
                self._let(view, key)
            self._count("released")
            text = (
                f"redis-placer: held {held:.0f}s, its longest hold ({self.max_hold_s:g}s): let "
                f"through although {decision.reason}"
            )
            self._event(view, key, "HoldReleased", text, "Warning")
            return Admission(True, warnings=(text,))
        if not dry_run:
            self._stop_asked(view, key)
            if decision.kind == "handover":
                self._want(view, key)
        self._count(decision.kind)
        return Admission(
            False,
            code=429,
            message=(
                f"redis-placer: {decision.reason}; retry (held {held:.0f}s, let through after "
                f"{self.max_hold_s:g}s at most)"
            ),
        )

    def _failovers_marked(self, view: GuardView, member: Member) -> tuple[str, bool]:
        """A failover in ``member``'s shard that some redis-placer has under way (why), by the
        marks on the members' pods as the API server has them now, and whether ``view`` was
        read before one of those marks changed: a failover began or ended since, and the
        reading's roles may be the old ones (``elections.FAILOVER_UNTIL``). A reading a second
        old would otherwise let the new master stop as the replica it read."""
        wall = self._wall()
        stale = False
        for m in view.snapshot.members:
            if m.shard_key != member.shard_key:
                continue
            namespace, name = m.key.split("/", 1)
            try:
                live = self.adapter.get_pod(namespace, name)
            except Exception as exc:  # the reading still answers; the marks are a refinement
                log.debug("guard: cannot read %s for failover marks: %s", m.key, exc)
                continue
            if live is None:
                continue
            marks = _annotations(live)
            if why := elections.failing_over(m.key, marks, wall):
                return why, stale
            read = _annotations(view.pods.get(m.key, {}))
            stale = stale or marks.get(FAILOVER_UNTIL) != read.get(FAILOVER_UNTIL)
        return "", stale

    def _let(self, view: GuardView, key: str) -> None:
        """``key`` is let stop: it is no successor and serves no shard from now on."""
        with self._lock:
            self._held.pop(key, None)
            self._asked_at.pop(key, None)
            self._let_go[key] = (self._clock(), _uid(view, key))

    def _health(self, view: GuardView) -> Mapping[str, MemberHealth]:
        """The reading's health, with the pods let stop since (not yet read as deleted) not
        serving."""
        now = self._clock()
        with self._lock:
            for key, (at, uid) in list(self._let_go.items()):
                if now - at >= LET_GO_S or key not in view.pods or _uid(view, key) != uid:
                    del self._let_go[key]  # gone, replaced, or the stop never came
            let_go = set(self._let_go)
        if not let_go & set(view.health):
            return view.health
        health = dict(view.health)
        for key in let_go & set(health):
            health[key] = health[key]._replace(ready=False, in_sync=False)
        return health

    def _timers(self, view: GuardView) -> tuple[dict[str, str], dict[str, str]]:
        """Redis's election timers still running after failovers of ours (this replica's, and
        any redis-placer's, marked on the pods): the pods that may not stand for election yet,
        and the masters no one votes about yet, each with why."""
        wall = self._wall()
        with self._lock:
            for timers in (self._stood, self._replaced):
                for key in [k for k, until in timers.items() if until <= wall]:
                    del timers[key]
            stood, replaced = dict(self._stood), dict(self._replaced)
        stand: dict[str, str] = {}
        votes: dict[str, str] = {}
        for key in {*view.pods, *stood, *replaced}:
            marked = _annotations(view.pods.get(key, {}))
            if why := elections.cannot_stand(key, marked, wall, also=stood.get(key)):
                stand[key] = why
            if why := elections.no_votes(key, marked, wall, also=replaced.get(key)):
                votes[key] = why
        return stand, votes

    def _elected(self, master: Member, successor: Member, endpoint: RedisEndpoint) -> None:
        """Remember Redis's election timers after a failover from ``master`` to ``successor``
        (one that failed too: the successor may have stood), here and on both pods."""
        stand, vote = elections.mark_failover(
            self.adapter.annotate_pod, successor.key, master.key, endpoint, self._wall()
        )
        with self._lock:
            self._stood[successor.key] = stand
            self._replaced[master.key] = vote

    def _stop_asked(self, view: GuardView, key: str) -> None:
        """Remember the refused stop, here and on the pod for the other replicas."""
        now = self._clock()
        with self._lock:
            self._asked_at[key] = (now, _uid(view, key))
        stamp = _stop_stamp(view, key)
        if stamp is not None and self._wall() - stamp < ASKED_STAMP_EVERY_S:
            return
        namespace, name = key.split("/", 1)
        try:
            self.adapter.annotate_pod(
                namespace, name, {STOP_ASKED_ANNOTATION: utc_stamp(self._wall())}
            )
        except Exception as exc:  # this replica still knows; the others ask the pod again
            log.warning("guard: cannot annotate %s: %s", key, exc)

    def _stops_asked(self, view: GuardView, *, but: str = "") -> set[str]:
        """Pods whose stop was refused lately (by any replica) and that are still there, as
        read: they are about to go."""
        now = self._clock()
        with self._lock:
            mine = {
                key
                for key, (at, uid) in self._asked_at.items()
                if now - at < ASKED_FRESH_S and key in view.pods and _uid(view, key) == uid
            }
        wall = self._wall()
        theirs = {
            key
            for key in view.pods
            if (stamp := _stop_stamp(view, key)) is not None and wall - stamp < ASKED_FRESH_S
        }
        return (mine | theirs) - view.deleting - {but}

    def _asked(self, view: GuardView) -> set[str]:
        """Pods whose handover was asked for: by this replica, or by any (on the pod)."""
        now = self._clock()
        with self._lock:
            wanted = {key for key, at in self._wanted.items() if now - at < WANTED_LOCAL_S}
        return wanted | {key for key in view.pods if _annotated(view, key)}

    def _handing_over(self, view: GuardView) -> set[str]:
        """Masters whose handover is asked for (here or on the pod) and not done."""
        asked = self._asked(view)
        return {m.key for m in view.snapshot.members if m.key in asked and m.role == Role.MASTER}

    def _want(self, view: GuardView, key: str) -> None:
        """Record the handover on the pod for whichever replica leads, and wake this one's loop."""
        now = self._clock()
        with self._lock:
            fresh = now - self._wanted.get(key, -WANTED_LOCAL_S) >= WANTED_LOCAL_S
            if fresh:
                self._wanted[key] = now
        if fresh and not _annotated(view, key):
            namespace, name = key.split("/", 1)
            try:
                self.adapter.annotate_pod(
                    namespace, name, {HANDOVER_ANNOTATION: utc_stamp(self._wall())}
                )
            except Exception as exc:  # the leader still sees it when this replica leads
                log.warning("guard: cannot annotate %s: %s", key, exc)
        self.wake.set()

    # -- acting (the leader) -------------------------------------------------------------------

    def run(self, stop: threading.Event, leading: Callable[[], bool]) -> None:
        """Read every ``refresh_s`` (or at once when the webhook asks); act while leading."""
        while not stop.is_set():
            try:
                self.step(leading())
            except Exception:  # one bad step never ends the guard
                log.exception("guard step failed")
            self.wake.wait(self.refresh_s)
            self.wake.clear()

    def step(self, leading: bool) -> list[str]:
        """One round; returns what it did, one line each (for logs and tests)."""
        view = self.refresh()
        if view is None:
            return []
        self._publish(view)
        if not leading:
            return []
        done = self._relabel(view)
        due = self._due(view)
        for key in due:
            view = self.current(0.0) or view
            decision = judge_disruption(
                view.snapshot,
                self.policy,
                key,
                self._health(view),
                view.going_pods() | {key},
                (),
                self._stops_asked(view, but=key),
                *self._timers(view),
            )
            if decision.kind == "handover":
                done.append(self._hand_over(view, decision, "maintenance"))
            elif decision.first is not None:  # its replica stops first: it must not wait on us
                self._forget(view, key)
                done.append(f"wait {key}: {decision.reason}")
            elif decision.kind == "wait":
                self._event(view, key, "HandoverWaiting", decision.reason, "Warning")
                done.append(f"wait {key}: {decision.reason}")
            else:
                self._forget(view, key)
        if not due and self.restore and self._clock() - self._last_restore >= RESTORE_EVERY_S:
            done.extend(self._restore(view))
        return done

    def _due(self, view: GuardView) -> list[str]:
        """Masters to hand over: asked for by a refused eviction or delete (here or on the pod),
        or on a node that is cordoned or tainted for disruption; one shard's at a time first."""
        wanted = self._asked(view)
        masters = {m.key for m in view.snapshot.members if m.role == Role.MASTER}
        due = sorted((wanted & masters) - view.deleting)
        due += [k for k in masters_on(view, view.going_nodes) if k not in due]
        for key in sorted(wanted - masters):
            self._forget(view, key)
        return due

    def _forget(self, view: GuardView, key: str) -> None:
        with self._lock:
            self._wanted.pop(key, None)
        if _annotated(view, key):
            namespace, name = key.split("/", 1)
            try:
                self.adapter.annotate_pod(namespace, name, {HANDOVER_ANNOTATION: None})
            except Exception as exc:
                log.warning("guard: cannot clear the annotation of %s: %s", key, exc)

    def _member(self, view: GuardView, key: str) -> Member:
        return next(m for m in view.snapshot.members if m.key == key)

    def _hand_over(self, view: GuardView, decision: Disruption, why: str) -> str:
        assert decision.successor is not None
        master = self._member(view, decision.pod)
        successor = self._member(view, decision.successor.pod)
        outcome = self.fail_over(view, master, successor, why)
        if outcome.startswith("handed"):
            self._forget(view, master.key)
        return outcome

    def fail_over(self, view: GuardView, master: Member, successor: Member, why: str) -> str:
        """``CLUSTER FAILOVER`` on ``successor``, then the role labels follow and an Event says
        so on both pods."""
        dial = view.dial
        target: RedisEndpoint | None = dial(successor) if dial is not None else None
        old: RedisEndpoint | None = dial(master) if dial is not None else None
        if target is None:
            return (
                f"failed {master.key}: {successor.key} cannot be reached (no pod IP or credentials)"
            )
        began = self._clock()
        with self._lock:
            self._failing_over[master.shard_key] = f"{master.key} -> {successor.key}"
        # The other replicas: no member of the shard stops while it is under way.
        elections.mark_failover_started(
            self.adapter.annotate_pod, master.key, self._wall(), self.failover_timeout_s
        )
        try:
            self._failover(target, self.failover_timeout_s, old_master_endpoint=old)
        except RedisOpsError as exc:
            self._ended(master, successor, target)
            self._tally(why, "failed")
            text = f"handing shard {master.shard_key} over to {successor.key} failed: {exc}"
            self._event(view, master.key, "HandoverFailed", text, "Warning")
            return f"failed {master.key}: {exc}"
        seconds = self._clock() - began
        self._ended(master, successor, target)
        self._tally(why, "ok")
        self._relabel_pair(view, master, successor)
        node = view.snapshot.node_by_name.get(master.pod.node_name or "")
        because = going_reason(node) if node is not None and why == "maintenance" else why
        text = (
            f"master role of shard {master.shard_key} handed to {successor.key} in "
            f"{seconds:.1f}s ({because})"
        )
        self._event(view, master.key, "HandedOver", text, "Normal")
        self._event(view, successor.key, "TookOver", text, "Normal")
        log.info("guard: %s", text)
        self.wake.set()
        return f"handed {master.key} -> {successor.key}"

    def _ended(self, master: Member, successor: Member, endpoint: RedisEndpoint) -> None:
        """The failover from ``master`` to ``successor`` is over, whatever came of it: marked so
        on the pod with Redis's election timers, and the next answer reads the roles again."""
        elections.mark_failover_ended(self.adapter.annotate_pod, master.key, self._wall())
        self._elected(master, successor, endpoint)
        with self._lock:
            self._failing_over.pop(master.shard_key, None)
            self._view = None

    def _tally(self, why: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.handovers.labels(why=why, outcome=outcome).inc()

    def _role_values(self, view: GuardView) -> Mapping[str, str]:
        from models.identity.role_labels import role_label_values

        return role_label_values(view.snapshot, self.policy)

    def _label(self, key: str, role: str, values: Mapping[str, str]) -> None:
        namespace, name = key.split("/", 1)
        result = self.adapter.patch_pod_labels(
            namespace, name, {self.policy.labels.role: values.get(role, role)}
        )
        if not result.ok:
            log.warning("guard: relabel %s: %s", key, result.message)

    def _relabel_pair(self, view: GuardView, master: Member, successor: Member) -> None:
        values = self._role_values(view)
        self._label(successor.key, Role.MASTER.value, values)
        self._label(master.key, Role.REPLICA.value, values)

    def _relabel(self, view: GuardView) -> list[str]:
        """Role labels follow Redis within a reading of a failover."""
        if not view.mismatches:
            return []
        values = self._role_values(view)
        done = []
        for mismatch in view.mismatches:
            self._label(mismatch.pod, mismatch.redis, values)
            done.append(f"relabel {mismatch.pod}: {mismatch.redis}")
        return done

    def _restore(self, view: GuardView) -> list[str]:
        """With nothing going and every member serving: the failovers a rebalance would make
        (no moves), each under the same safety rules."""
        self._last_restore = self._clock()
        members = [m for m in view.snapshot.members if not m.pod.pending]
        if view.going_nodes and any(m.pod.node_name in view.going_nodes for m in members):
            return []
        if view.deleting or any(
            not (h := view.health.get(m.key)) or not (h.ready and h.in_sync) for m in members
        ):
            return []
        from solver.changes import change_list
        from solver.check import audit
        from solver.repair import Caps
        from solver.solve import SolveOptions, solve

        if not audit(view.snapshot, self.policy):
            return []
        plan = solve(
            view.snapshot,
            self.policy,
            "rebalance",
            SolveOptions(
                deadline=time.monotonic() + 5.0,
                caps=Caps(max_moves=0, max_failovers=None),
                explain=False,
                search=False,
            ),
        )
        done = []
        for change in change_list(plan, view.snapshot):
            if change["kind"] != "failover":
                continue
            view = self.current(0.0) or view
            master = self._member(view, change["from"])
            successor = self._member(view, change["to"])
            if master.role != Role.MASTER:
                continue  # Redis moved on since the solve
            cannot_stand, no_votes = self._timers(view)
            if successor.key in cannot_stand or master.key in no_votes:
                why = cannot_stand.get(successor.key) or no_votes[master.key]
                done.append(f"later {master.key}: {why}")
                continue  # the next restore, once Redis lets it go quickly
            done.append(self.fail_over(view, master, successor, "restore"))
        return done

    # -- telling -------------------------------------------------------------------------------

    def _event(self, view: GuardView, key: str, reason: str, message: str, kind: str) -> None:
        """An Event on the pod, the same one at most once a minute."""
        now = self._clock()
        with self._lock:
            last = self._told.get((key, reason + message))
            if last is not None and now - last < 60.0:
                return
            self._told[(key, reason + message)] = now
        obj = view.pods.get(key)
        if obj is None:
            return
        try:
            self.adapter.record_event(obj, reason, message, kind, component=COMPONENT)
        except Exception as exc:
            log.warning("guard: event on %s: %s", key, exc)

    def _publish(self, view: GuardView) -> None:
        """The survival gauges, from the checker's verdicts on the running placement."""
        if self.metrics is None:
            return
        from solver.check import keep_plan
        from solver.survival import survival_verdicts

        for verdict in survival_verdicts(view.snapshot, self.policy, keep_plan(view.snapshot)):
            broken = verdict.judged and not verdict.survived
            self.metrics.survival_broken.labels(level=verdict.level).set(1 if broken else 0)


def _uid(view: GuardView, key: str) -> str:
    return str((view.pods.get(key, {}).get("metadata") or {}).get("uid") or "")


def _stop_stamp(view: GuardView, key: str) -> float | None:
    """When the pod's stop was last refused, from its annotation (seconds since the epoch)."""
    return read_utc_stamp(_annotations(view.pods.get(key, {})).get(STOP_ASKED_ANNOTATION))


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _annotated(view: GuardView, key: str) -> bool:
    """The pod, as read, carries the handover request."""
    return HANDOVER_ANNOTATION in _annotations(view.pods.get(key, {}))


__all__ = ["HANDOVER_ANNOTATION", "STOP_ASKED_ANNOTATION", "Admission", "Guard"]


def _why_skipped(view: GuardView, member: Member) -> str:
    """The snapshot's own word on why ``member``'s shard is not judged."""
    wanted = {f"shard {member.shard_key}", f"pod {member.key}"}
    found = next((i.message for i in view.snapshot.issues if i.object in wanted), None)
    return f"shard {member.shard_key} {found}" if found else f"shard {member.shard_key} is not read"
