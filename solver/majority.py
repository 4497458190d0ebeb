"""A place-mode plan never leaves a Redis cluster further short of a master majority, against
the loss of one domain at ``rules.survive``, than its running pods leave it.

The levels and greedy each keep the rule for the masters they place, counting every master the
batch would add. A shard that a lower level could not finish and greedy could not place either
takes its master out of that count after the fact: the masters placed in a domain that already
held too many then leave their cluster further short than before. Every place-mode candidate
passes through here before it is judged, whichever engine made it.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from models.cluster import Member, Role
from models.policy import Policy
from models.snapshot import Snapshot
from solver.placement import Placement


@dataclass
class _Masters:
    """One Redis cluster's masters: all that exist, those on a node of the snapshot, and those
    per domain; and the shards whose master the plan places, per domain."""

    total: int = 0
    alive: int = 0
    inside: Counter[str | None] = field(default_factory=Counter)
    new: dict[str | None, list[str]] = field(default_factory=lambda: defaultdict(list))

    def short(self) -> int:
        """Masters short of a strict majority after the worst single domain's loss."""
        needed = self.total // 2 + 1
        most = max(self.inside.values(), default=0)
        return max(0, needed - (self.alive - most))


def _count(snapshot: Snapshot, placement: Placement | None, level: str) -> dict[str, _Masters]:
    """Per Redis cluster, its masters once ``placement`` is carried out (None: what runs)."""
    nodes = snapshot.node_by_name
    out: dict[str, _Masters] = defaultdict(_Masters)
    for m in snapshot.members:
        name, role = _final(m, placement)
        if role is not Role.MASTER or (name is None and m.pod.pending):
            continue
        masters = out[m.cluster]
        masters.total += 1
        node = nodes.get(name) if name is not None else None
        if node is None:
            continue  # on a node gone from the snapshot: lost whatever fails
        masters.alive += 1
        domain = node.domain(level)
        masters.inside[domain] += 1
        if m.pod.pending:
            masters.new[domain].append(m.shard_key)
    return out


def _final(m: Member, placement: Placement | None) -> tuple[str | None, Role | None]:
    if not m.pod.pending:
        return m.pod.node_name, m.role or Role.REPLICA
    if placement is None or m.key not in placement.node:
        return None, None
    return placement.node[m.key], placement.role.get(m.key)


def keep_majorities(snapshot: Snapshot, policy: Policy, placement: Placement) -> set[str]:
    """Leave out the shards whose placed master leaves its cluster further short of a majority
    than what runs (the shards with the fewest members first, one at a time, from the domain
    whose loss is the worst); returns the shards left out."""
    level = policy.rules.survive
    if level == "none":
        return set()
    before = _count(snapshot, None, level)
    after = _count(snapshot, placement, level)
    dropped: set[str] = set()
    pending: dict[str, list[Member]] = defaultdict(list)
    for m in snapshot.pending:
        pending[m.shard_key].append(m)
    for cluster, masters in sorted(after.items()):
        was = before[cluster].short() if cluster in before else 0
        while masters.short() > was:
            worst = max(masters.inside, key=lambda d: (masters.inside[d], str(d)))
            shards = masters.new.get(worst)
            if not shards:
                break  # the worst domain gained no master: adding elsewhere never hurts
            victim = min(shards, key=lambda s: (len(pending[s]), s))
            shards.remove(victim)
            masters.total -= 1
            masters.alive -= 1
            masters.inside[worst] -= 1
            dropped.add(victim)
            for m in pending[victim]:
                placement.node.pop(m.key, None)
                placement.role.pop(m.key, None)
                placement.unplaced[m.key] = (
                    f"its master in {level} {worst} would leave Redis cluster {cluster} further "
                    f"short of a master majority against that {level}'s loss than the running "
                    f"pods leave it ({was} short); a plan never makes a broken survive rule worse"
                )
    return dropped
