"""Permit: hold a shard's pending pods until the whole shard is there, like kube-scheduler's gang Permit.

Pure: the binder hands in what it sees (pods present, expected size, how long the oldest has
waited) and gets one decision per shard. Nothing here remembers anything, so a restarted
binder decides the same way from the same cluster (ages come from creationTimestamp).
"""

from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from models.policy import Permit as PermitPolicy
from models.snapshot import Snapshot

Decision = Literal["allow", "wait", "reject"]


@dataclass(frozen=True)
class Gang:
    """One shard as the binder sees it: its pending pods (ours) and the members already placed."""

    shard: str
    pending: tuple[str, ...]
    placed: int
    expected: int | None
    waited: float
    """Seconds the oldest pending member has waited."""
    ordered: bool = False
    """Its missing members appear only after the present ones run: never held."""

    @property
    def present(self) -> int:
        return self.placed + len(self.pending)


@dataclass(frozen=True)
class PermitDecision:
    shard: str
    decision: Decision
    reason: str
    recheck_in: float | None = None
    """For ``wait``: seconds until the wait runs out and the decision changes."""


def gangs(snapshot: Snapshot, ours: Collection[str], waited: Mapping[str, float]) -> list[Gang]:
    """Group the pending pods the binder is responsible for (``ours``) by shard."""
    pending: dict[str, list[str]] = defaultdict(list)
    placed: dict[str, int] = defaultdict(int)
    expected: dict[str, int] = {}
    ordered: set[str] = set()
    for member in snapshot.members:
        key = member.shard_key
        if member.ordered:
            ordered.add(key)
        if member.shard_size is not None:
            expected[key] = max(expected.get(key, 0), member.shard_size)
        if member.pod.pending:
            if member.key in ours:
                pending[key].append(member.key)
        elif not member.pod.deleting:
            placed[key] += 1
    return [
        Gang(
            shard=key,
            pending=tuple(sorted(pods)),
            placed=placed[key],
            expected=expected.get(key),
            waited=max(waited.get(p, 0.0) for p in pods),
            ordered=key in ordered,
        )
        for key, pods in sorted(pending.items())
    ]


def decide(gang: Gang, policy: PermitPolicy) -> PermitDecision:
    """allow: solve it now; wait: members are still coming; reject: waited too long, still held."""
    if gang.expected is None:
        return PermitDecision(gang.shard, "allow", "shard size unknown: placing the pods present")
    if gang.present >= gang.expected:
        return PermitDecision(
            gang.shard, "allow", f"all {gang.expected} members present ({gang.placed} placed)"
        )
    counts = f"{gang.present} of {gang.expected} members present"
    if gang.ordered:
        return PermitDecision(
            gang.shard,
            "allow",
            f"{counts}; the rest are created only once these run: placing them now, "
            "with room kept for the rest",
        )
    if gang.waited < policy.wait_seconds:
        # Said the same way at every step, so its Event is folded, not repeated.
        return PermitDecision(
            gang.shard,
            "wait",
            f"waiting for the whole shard: {counts}; held at most {policy.wait_seconds:g}s "
            "from its first member's arrival (permit.waitSeconds)",
            recheck_in=policy.wait_seconds - gang.waited,
        )
    if policy.allow_partial_shards:
        return PermitDecision(
            gang.shard,
            "allow",
            f"waited {policy.wait_seconds:g}s with {counts}: placing those present",
        )
    return PermitDecision(
        gang.shard,
        "reject",
        f"waited {policy.wait_seconds:g}s with {counts}; held until the rest arrive "
        "(permit.allowPartialShards is false)",
    )
