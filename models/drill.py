"""A failure drill's answer: what losing one or more topology domains does to each Redis cluster."""

from typing import Literal

from pydantic import Field

from models.base import Wire
from models.plan import SkippedInput
from models.policy import Level


class FailedDomain(Wire):
    level: Level
    domain: str


class Promotion(Wire):
    """The replica Redis would elect in place of a lost master."""

    shard: str
    from_: str = Field(alias="from")
    to: str
    offset: int | None = None
    """The winner's replication offset, when it was read from Redis."""


class ShardOutcome(Wire):
    """One shard that lost at least one member."""

    shard: str
    members: int
    members_left: int
    master_lost: bool
    promoted: str | None = None
    available: bool
    """It still has a master serving its slots after the failure (and any promotion)."""
    reason: str = ""
    """Why it is unavailable, in words (empty when available)."""
    slots: int | None = None
    """Hash slots the shard served, when read from Redis."""


class ClusterOutcome(Wire):
    """One Redis cluster with a member in the lost domain(s)."""

    cluster: str
    masters: int
    masters_lost: int
    majority_kept: bool
    """Strictly more than half of the masters are left: Redis can still authorize failovers."""
    shards: int
    shards_lost: int
    """Shards with no member left at all: their data is gone with the domain."""
    promotions: list[Promotion] = []
    unavailable_shards: list[str] = []
    """Shards left without a serving master: lost, or their master lost with no failover possible."""
    slots_unavailable: int | None = None
    """Hash slots of the unavailable shards; None when slots were not read from Redis."""
    state: Literal["ok", "fail"]
    """``fail`` when the master majority is lost or some slot has no master (Redis' default
    ``cluster-require-full-coverage yes`` then refuses every query)."""
    masters_per_zone: dict[str, int] = {}
    """Masters serving after the failure and its promotions, per zone."""
    affected_shards: list[ShardOutcome] = []


class Failure(Wire):
    """One drilled failure: the domains lost together and what that does."""

    level: str
    """The level of the lost domain, or the levels joined with ``+`` for a combined failure."""
    domain: str
    """The lost domain, or the domains joined with ``+``."""
    domains: list[FailedDomain]
    nodes_lost: list[str] = []
    clusters: list[ClusterOutcome] = []

    @property
    def loses_data_or_majority(self) -> bool:
        """Some shard loses every member, or some cluster its master majority."""
        return any(c.shards_lost or not c.majority_kept for c in self.clusters)


class DrillReport(Wire):
    placement: Literal["running", "plan"]
    """Whose placement was drilled: the pods as they run, or a plan's final placement."""
    placement_note: str = ""
    """Why the running placement was drilled though a plan was given (it changes nothing), in
    words; empty otherwise."""
    roles: Literal["labels", "redis"] = "labels"
    promotion_rule: str = ""
    """How the promoted replica is chosen, in words."""
    slots: Literal["redis", "not read"] = "not read"
    failures: list[Failure] = []
    members: int = 0
    """Redis pods with a node in the drilled placement."""
    left_out: list[str] = []
    """Managed pods with no node in the drilled placement (pending, unplaced): not drilled."""
    skipped: list[SkippedInput] = []
    """Input issues, as a plan lists them."""
    warnings: list[str] = []
    """About the input in words, as a plan lists them (e.g. fewer than 3 masters)."""
    unlabelled: list[str] = []
    """Nodes holding Redis pods of the drilled placement without the drilled level's label:
    which domain's loss takes them is unknown, so a domain that survives here may not."""

    def to_json_dict(self) -> dict[str, object]:
        return self.model_dump(mode="json", by_alias=True)
