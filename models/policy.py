"""The placement policy file. Strict: an unknown key is an error, defaults serve without a file."""

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, model_validator

from models.base import Wire

Level = Literal["host", "rack", "zone"]
LEVELS: tuple[Level, ...] = ("host", "rack", "zone")
Strength = Literal["required", "preferred", "ignore"]
Survive = Literal["none", "host", "rack", "zone"]


class LabelKeys(Wire):
    cluster: str = "redis-cluster"
    shard: str = "redis-shard"
    role: str = "redis-role"


class TopologyKeys(Wire):
    zone: str = "topology.kubernetes.io/zone"
    rack: str = "rack"
    host: str = "kubernetes.io/hostname"

    def key(self, level: Level) -> str:
        return str(getattr(self, level))


class ReplicaSeparation(Wire):
    host: Strength = "required"
    rack: Strength = "preferred"
    zone: Strength = "preferred"

    def strength(self, level: Level) -> Strength:
        value: Strength = getattr(self, level)
        return value


class Rules(Wire):
    max_masters_per_node: int = Field(default=1, ge=1)
    replica_separation: ReplicaSeparation = ReplicaSeparation()
    survive: Survive = "none"


MAX_WEIGHT = 1_000_000
"""Largest weight a policy may give: the solver multiplies weights by counts of pods, domains and
percent, and the product must stay an exact 64-bit integer on the largest clusters."""


class Weights(Wire):
    """Costs of the soft terms, in the order users weigh them: losing masters to one failure
    (a zone's, then a rack's), then replicas sharing their master's domain, then stacked
    masters, then memory balance (docs/objective.md)."""

    survival: int = Field(default=100, ge=0, le=MAX_WEIGHT)
    rack_survival: int = Field(default=20, ge=0, le=MAX_WEIGHT)
    rack: int = Field(default=50, ge=0, le=MAX_WEIGHT)
    zone: int = Field(default=30, ge=0, le=MAX_WEIGHT)
    master_balance: int = Field(default=10, ge=0, le=MAX_WEIGHT)
    load_balance: int = Field(default=1, ge=0, le=MAX_WEIGHT)
    move: int = Field(default=100, ge=0, le=MAX_WEIGHT)
    failover: int = Field(default=20, ge=0, le=MAX_WEIGHT)

    def separation(self, level: Level) -> int:
        return 0 if level == "host" else int(getattr(self, level))


MAX_TIME_LIMIT_SECONDS = 86_400.0
MAX_WORKERS = 256


class SolverOptions(Wire):
    time_limit_seconds: float = Field(
        default=10.0, gt=0, le=MAX_TIME_LIMIT_SECONDS, allow_inf_nan=False
    )
    """Budget of one whole call (reading the input to printing the plan)."""
    workers: int = Field(default=0, ge=0, le=MAX_WORKERS)
    """CP-SAT search workers; 0 is the default, one worker with a deterministic budget (the same
    input gives the same plan). More workers may find better plans on hard inputs, run to run
    differently."""
    relative_gap: float = Field(default=0.0, ge=0, lt=1, allow_inf_nan=False)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    """CP-SAT's random seed: the same input and policy give the same plan."""


class Permit(Wire):
    wait_seconds: float = Field(default=30.0, ge=0, allow_inf_nan=False)
    batch_window_seconds: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    allow_partial_shards: bool = False


class Degradation(Wire):
    relax_when_infeasible: bool = True


class RedisAccess(Wire):
    """How `rebalance --roles redis` reaches the Redis processes (extension)."""

    port: int = Field(default=6379, ge=1, le=65535)
    password_env: str | None = None
    password_file: str | None = None


class Policy(Wire):
    scheduler_name: str = "redis-placer"
    selector: dict[str, str] = Field(default_factory=lambda: {"app": "redis"})
    labels: LabelKeys = LabelKeys()
    topology: TopologyKeys = TopologyKeys()
    rules: Rules = Rules()
    weights: Weights = Weights()
    solver: SolverOptions = SolverOptions()
    permit: Permit = Permit()
    degradation: Degradation = Degradation()
    redis: RedisAccess = RedisAccess()

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with these labels is a managed Redis pod (``selector`` matches)."""
        return all(labels.get(k) == v for k, v in self.selector.items())

    @model_validator(mode="after")
    def _consistent(self) -> "Policy":
        if not self.selector:
            raise ValueError("selector must not be empty: it would manage every pod in the cluster")
        keys = [self.labels.cluster, self.labels.shard, self.labels.role]
        if len(set(keys)) != 3 or not all(keys):
            raise ValueError(
                "labels.cluster, labels.shard and labels.role must be distinct, non-empty keys"
            )
        if self.rules.replica_separation.host != "required":
            raise ValueError(
                "rules.replicaSeparation.host must be 'required': two members of one shard never share a host "
                "(shard-spread is always enforced), so a weaker setting contradicts it"
            )
        survive = self.rules.survive
        if survive != "none" and not self.topology.key(survive):
            raise ValueError(f"rules.survive is {survive!r} but topology.{survive} names no label")
        for level in LEVELS:
            if not self.topology.key(level):
                strength = self.rules.replica_separation.strength(level)
                if strength != "ignore":
                    raise ValueError(
                        f"rules.replicaSeparation.{level} is {strength!r} but topology.{level} names no label"
                    )
        return self

    def level_in_use(self, level: Level) -> bool:
        return (
            self.rules.replica_separation.strength(level) != "ignore" or self.rules.survive == level
        )
