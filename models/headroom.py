"""Headroom: how many more shards of one shape fit under every hard rule, and what binds."""

from pydantic import Field

from models.base import Value, Wire
from models.cluster import SelectorTerm, Toleration
from models.plan import SkippedInput, Status
from models.resources import Resources


class ShardShape(Value):
    """The shards asked about: members per shard, each member's requests, the Redis cluster."""

    size: int = Field(ge=1)
    requests: Resources
    """Per member; ``pods`` is 1."""
    cluster: str = "headroom/new"
    """``namespace/name`` of the Redis cluster the shards join (a new one by default)."""
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = {}
    affinity_terms: tuple[SelectorTerm, ...] = ()


class CapacityBound(Wire):
    """One upper bound on the number of shards, from one resource or rule."""

    limit: str
    """What it counts, e.g. ``memory`` or ``master slots (rules.maxMastersPerNode 1)``."""
    shards: int | None
    """None: the shape does not request this resource, so it bounds nothing."""
    where: list[str] = []
    """The domains (zones) whose room runs out first, when that is not everywhere."""


class Headroom(Wire):
    shards: int
    """Additional shards of the shape that fit with every hard rule kept."""
    status: Status
    """OPTIMAL: ``shards`` is proven to be the most; FEASIBLE: at least ``shards``, at most ``bound``."""
    bound: int
    """A proven upper bound (equal to ``shards`` when OPTIMAL)."""
    limited_by: str
    """The resource or rule that binds first."""
    bounds: list[CapacityBound] = []
    """Every capacity bound, smallest first: what the solve was given to beat."""
    cluster: str
    shard_size: int
    cpu_millis: int
    memory_bytes: int
    candidates: int = 0
    """Shards offered to the solver (the smallest bound, capped)."""
    solve_seconds: float = 0.0
    pending_ignored: list[str] = []
    """Pending pods of the input, left out: headroom is counted on top of what runs."""
    note: str = ""
    survival: list[str] = []
    """Per level: whether the cluster, with these shards added, could survive one domain's loss
    (some placement keeps each shard and a master majority), and what would if not."""
    explanation: list[str] = []
    """Why the candidates beyond ``shards`` could not be placed, as the solver explains it."""
    skipped: list[SkippedInput] = []
    """Input issues, as a plan lists them: with an error, the answer leaves out what it skipped."""

    def to_json_dict(self) -> dict[str, object]:
        return self.model_dump(mode="json", by_alias=True)
