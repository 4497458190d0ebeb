"""What a caller that solves batch after batch keeps warm between them: the checker's verdict on
the running placement (solver/judging.py), the levels' totals of it (solver/levels/standing.py)
and which kinds of pod each node accepts (solver/levels/rooms.py EligibilityCache).

The first two are invalidated by what touched them since the last batch: nodes added, changed or gone
(every shard with a member on them), and pods added, changed or gone (their shard). ``changes``
reads that off two snapshots by object identity: the binder's snapshots reuse the parsed objects
of every pod and node that did not change (models/kube_objects.ParseCache), so the diff costs a
lookup per object, and anything rebuilt counts as changed.

A pod bound to a node changes its own shard and that node's totals, not the other shards on the
node: a shard's part of the verdict reads its own members and the nodes they are on. So a batch
of bindings re-judges the shards bound, not every shard sharing a node with them.
"""

from dataclasses import dataclass, field

from models.policy import Policy
from models.snapshot import Snapshot
from solver.collector import collector_paused
from solver.judging import RunningVerdict
from solver.levels.rooms import EligibilityCache
from solver.levels.standing import StandingCache


def changes(old: Snapshot, new: Snapshot) -> tuple[set[str], set[str]]:
    """(node names, shard keys) that differ between the two snapshots: nodes whose Node object
    was added, changed or removed, and shards with a member added, changed or removed. Where
    pods moved, the nodes' totals follow from those shards' old and new members."""
    nodes: set[str] = set()
    shards: set[str] = set()
    before, after = old.node_by_name, new.node_by_name
    for name in before.keys() | after.keys():
        if before.get(name) is not after.get(name):
            nodes.add(name)
    was = {m.key: m for m in (*old.members, *old.skipped_members)}
    for m in (*new.members, *new.skipped_members):
        prior = was.pop(m.key, None)
        if prior is m:
            continue
        shards.add(m.shard_key)
        if prior is not None:
            shards.add(prior.shard_key)
    shards.update(prior.shard_key for prior in was.values())  # gone
    return nodes, shards


@dataclass
class Warm:
    """The caches, for one policy; ``prepare`` brings them to a new snapshot."""

    policy: Policy
    verdict: RunningVerdict | None = None
    standing: StandingCache | None = None
    eligibility: EligibilityCache = field(default_factory=EligibilityCache)
    last: Snapshot | None = field(default=None, repr=False)

    def prepare(self, snapshot: Snapshot, policy: Policy) -> None:
        with collector_paused():  # tens of thousands of small records on a first build
            self._prepare(snapshot, policy)

    def _prepare(self, snapshot: Snapshot, policy: Policy) -> None:
        if policy != self.policy or self.last is None:
            self.policy = policy
            self.verdict = RunningVerdict(snapshot, policy)
            self.standing = StandingCache(snapshot)
            self.eligibility = EligibilityCache()
        elif snapshot is not self.last:
            nodes, shards = changes(self.last, snapshot)
            assert self.verdict is not None and self.standing is not None
            self.verdict.update(snapshot, nodes, shards)
            self.standing.update(snapshot, nodes, shards)
        self.last = snapshot
