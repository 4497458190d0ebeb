"""The placement policy file. Strict: an unknown key is an error, defaults serve without a file."""

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, model_validator

from models.base import Wire
from models.identity.config import Identity
from models.identity.profiles import with_profile

Level = Literal["host", "rack", "zone"]
LEVELS: tuple[Level, ...] = ("host", "rack", "zone")
Strength = Literal["required", "preferred", "ignore"]
Survive = Literal["none", "host", "rack", "zone"]


class LabelKeys(Wire):
    """Pod labels that say which Redis cluster, shard and role a pod has."""

    cluster: str = Field(
        default="redis-cluster",
        description="Pod label naming the pod's Redis cluster (within the pod's namespace).",
    )
    shard: str = Field(
        default="redis-shard", description="Pod label naming the pod's shard in its Redis cluster."
    )
    role: str = Field(
        default="redis-role",
        description="Pod label with the pod's role, `master` or `replica` (`slave` accepted). "
        "Absent on a new shard's pods: the solver chooses their roles, one master per shard.",
    )


class TopologyKeys(Wire):
    """Node labels that name the failure domains a node is in."""

    zone: str = Field(
        default="topology.kubernetes.io/zone",
        description="Node label naming the node's zone. A node without it (or with an empty "
        'value) takes no new Redis pod. A cluster in one zone sets `""` with '
        "`rules.replicaSeparation.zone: ignore`.",
    )
    rack: str = Field(
        default="rack",
        description="Node label naming the node's rack. In a cluster with no rack labels "
        "each zone counts as one rack.",
    )
    host: str = Field(
        default="kubernetes.io/hostname",
        description="Node label naming the node's host: two members of one shard never share one.",
    )

    def key(self, level: Level) -> str:
        return str(getattr(self, level))


class ReplicaSeparation(Wire):
    """Per level, how strongly a replica is kept out of its own master's domain."""

    host: Strength = Field(
        default="required",
        description="Must be `required`: two members of one shard never share a host "
        "(shard-spread is always enforced).",
    )
    rack: Strength = Field(
        default="preferred",
        description="A replica in its master's rack: `required` (a hard rule), `preferred` "
        "(costs `weights.rack` per replica) or `ignore`.",
    )
    zone: Strength = Field(
        default="preferred",
        description="A replica in its master's zone: `required` (a hard rule), `preferred` "
        "(costs `weights.zone` per replica) or `ignore`.",
    )

    def strength(self, level: Level) -> Strength:
        value: Strength = getattr(self, level)
        return value


class Rules(Wire):
    """The hard rules a plan keeps, beyond fits and shard-spread (which always hold)."""

    max_masters_per_node: int = Field(
        default=1,
        ge=1,
        description="At most this many masters on one node, every Redis cluster counted "
        "(master-exclusivity, hard).",
    )
    replica_separation: ReplicaSeparation = Field(
        default=ReplicaSeparation(),
        description="Per level, whether a replica may share a domain with its own master.",
    )
    survive: Survive = Field(
        default="none",
        description="With `zone`, `rack` or `host`: losing any one domain of that level keeps a "
        "member of every shard and strictly more than half of each Redis cluster's masters "
        "(hard). `none` turns the rule off.",
    )


MAX_WEIGHT = 1_000_000
"""Largest weight a policy may give: the solver multiplies weights by counts of pods, domains and
percent, and the product must stay an exact 64-bit integer on the largest clusters."""


class Weights(Wire):
    """Costs of the soft terms, in the order users weigh them: losing masters to one failure
    (a zone's, then a rack's), then replicas sharing their master's domain, then the members
    one zone failure takes, then stacked masters, then memory balance (docs/objective.md)."""

    survival: int = Field(
        default=100,
        ge=0,
        le=MAX_WEIGHT,
        description="Per Redis cluster, cost per master in its fullest zone: the masters one "
        "zone failure takes.",
    )
    rack_survival: int = Field(
        default=20,
        ge=0,
        le=MAX_WEIGHT,
        description="Per Redis cluster, cost per master in its fullest rack (racks counted "
        "inside their zone): masters spread over racks so one rack failure takes few.",
    )
    rack: int = Field(
        default=50,
        ge=0,
        le=MAX_WEIGHT,
        description="Cost per replica in its master's rack, when "
        "`rules.replicaSeparation.rack` is `preferred`.",
    )
    zone: int = Field(
        default=30,
        ge=0,
        le=MAX_WEIGHT,
        description="Cost per replica in its master's zone, when "
        "`rules.replicaSeparation.zone` is `preferred`.",
    )
    member_spread: int = Field(
        default=10,
        ge=0,
        le=MAX_WEIGHT,
        description="Per Redis cluster, cost per member in its fullest zone: the members one "
        "zone failure takes. Members spread over zones let failovers alone put the masters "
        "back after a rollout, a drain or a zone's return (a pod that comes back goes to the "
        "zone it left).",
    )
    superseded: int = Field(
        default=5,
        ge=0,
        le=MAX_WEIGHT,
        description="Cost per member on a node whose pool has Ready nodes of a newer kubelet "
        "release: the node-pool upgrade under way drains it next, so a pod placed there is "
        "evicted twice. Below `memberSpread`: a pod stays in its zone on an old node rather "
        "than leave it.",
    )
    master_balance: int = Field(
        default=10,
        ge=0,
        le=MAX_WEIGHT,
        description="Cost per master beyond the first on any node, every Redis cluster counted.",
    )
    load_balance: int = Field(
        default=1,
        ge=0,
        le=MAX_WEIGHT,
        description="Cost per percent of the highest memory utilisation among the nodes that "
        "host a managed Redis pod.",
    )
    move: int = Field(
        default=100,
        ge=0,
        le=MAX_WEIGHT,
        description="Rebalance only: cost per running pod moved to another node.",
    )
    failover: int = Field(
        default=20,
        ge=0,
        le=MAX_WEIGHT,
        description="Rebalance only: cost per shard whose master changes.",
    )

    def separation(self, level: Level) -> int:
        return 0 if level == "host" else int(getattr(self, level))


MAX_TIME_LIMIT_SECONDS = 86_400.0
MAX_WORKERS = 256


class SolverOptions(Wire):
    """How `plan`, `audit`, `rebalance`, `drill` and `headroom` run CP-SAT."""

    time_limit_seconds: float = Field(
        default=10.0,
        gt=0,
        le=MAX_TIME_LIMIT_SECONDS,
        allow_inf_nan=False,
        description="Budget of one whole command, from reading the input to printing the plan "
        "(`--time-limit` overrides it).",
    )
    workers: int = Field(
        default=0,
        ge=0,
        le=MAX_WORKERS,
        description="CP-SAT search workers. 0: one worker with a deterministic budget, so the "
        "same input gives the same plan. More workers may find better plans on hard inputs, "
        "run to run differently (`--workers`).",
    )
    relative_gap: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="CP-SAT stops once its plan is proven within this fraction of the best "
        "objective; 0 searches until the proof or the time limit.",
    )
    seed: int = Field(
        default=0,
        ge=0,
        le=2**31 - 1,
        description="CP-SAT's random seed: the same input, policy and seed give the same plan "
        "(`--seed`).",
    )


class Permit(Wire):
    """When the binder lets a shard's pending pods through to a solve."""

    wait_seconds: float = Field(
        default=30.0,
        ge=0,
        allow_inf_nan=False,
        description="How long a shard's pods, counted from their creation, wait for its missing "
        "members.",
    )
    batch_window_seconds: float = Field(
        default=1.0,
        ge=0,
        allow_inf_nan=False,
        description="How long shards that are ready are collected into one solve, at most: a "
        "full batch goes at once, and so do shards that became ready while the last batch was "
        "being solved or bound.",
    )
    allow_partial_shards: bool = Field(
        default=False,
        description="Place a shard's members present instead of the whole shard or none: the "
        "binder after `waitSeconds`, the solver for a shard that does not fit whole.",
    )


class Degradation(Wire):
    """What a plan may give up when the rules cannot all hold."""

    relax_when_infeasible: bool = Field(
        default=True,
        description="When required separation levels leave pods unplaced, they become heavy "
        "penalties: the plan is marked `degraded: true` and lists the broken rules.",
    )


class SecretKey(Wire):
    """A key of a Kubernetes Secret in the namespace of the Redis pods that use it."""

    name: str = Field(
        min_length=1,
        description="The Secret's name; `{cluster}` stands for the Redis cluster's name (the "
        "`labels.cluster` value, e.g. the Helm release or the custom resource).",
    )
    key: str = Field(min_length=1, description="The key inside the Secret.")


class RedisAuth(Wire):
    """The password (and ACL user) of the Redis pods, where the pods' own spec does not tell."""

    secret: SecretKey | None = Field(
        default=None,
        description="The Secret key holding the password. Unset: the one the pods read it from "
        "(their REDIS_PASSWORD, REDISCLI_AUTH, VALKEY_PASSWORD or VALKEYCLI_AUTH environment "
        "variable, or a *_FILE variable pointing into a Secret volume), as the deployment's own "
        "clients do.",
    )
    username: str | None = Field(
        default=None,
        description="ACL user to authenticate as. Unset: the pods' VALKEY_USER variable where "
        "it pairs with VALKEYCLI_AUTH, else the default user.",
    )


class TlsSecret(Wire):
    """A Secret with the CA that signs the Redis servers and, for servers that ask for one
    (`tls-auth-clients`), a client certificate and key."""

    name: str = Field(
        min_length=1,
        description="The Secret's name, in the Redis pods' namespace; `{cluster}` stands for "
        "the Redis cluster's name.",
    )
    ca: str = Field(default="ca.crt", min_length=1, description="Key of the CA certificate.")
    cert: str | None = Field(
        default="tls.crt", description="Key of the client certificate; null: none is shown."
    )
    key: str | None = Field(
        default="tls.key", description="Key of the client certificate's private key."
    )


class RedisTlsPolicy(Wire):
    """Whether and how `rebalance` and `drill` speak TLS to Redis."""

    mode: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="auto: TLS when the pods mount TLS material for their server (read from "
        "their spec, as for the password); on: always (from `secret` or the files); off: never.",
    )
    secret: TlsSecret | None = Field(
        default=None,
        description="The Secret with the CA (and client certificate) to use, over what the pods "
        "mount.",
    )
    ca_file: str | None = Field(
        default=None, description="A CA file, for runs outside the cluster (`-f` dumps)."
    )
    cert_file: str | None = Field(default=None, description="A client certificate file.")
    key_file: str | None = Field(default=None, description="The client certificate's key file.")


class RedisAccess(Wire):
    """How `rebalance` and `drill` reach the Redis processes (`--apply`, `--roles redis`).

    In the cluster the password and the TLS material come from the Secrets the deployment
    already has (read through the API, `get` on Secrets in the Redis namespaces); the server is
    verified against the CA, not its host name (the pods are dialled by IP, which the
    deployments' certificates do not name)."""

    port: int = Field(
        default=6379, ge=1, le=65535, description="Redis port of the pods (`--redis-port`)."
    )
    password_env: str | None = Field(
        default=None,
        description="Environment variable that holds the Redis password (`--password-env`); "
        "over any Secret.",
    )
    password_file: str | None = Field(
        default=None,
        description="File that holds the Redis password (`--password-file`); over any Secret.",
    )
    auth: RedisAuth = Field(
        default=RedisAuth(), description="Where the password is, where the pods do not say."
    )
    tls: RedisTlsPolicy = Field(default=RedisTlsPolicy(), description="TLS to the Redis pods.")


class Policy(Wire):
    """The placement policy file (`-p`); every key is optional."""

    scheduler_name: str = Field(
        default="redis-placer",
        description="`spec.schedulerName` of the pods the binder binds in bind mode "
        "(`--enforce bind`).",
    )
    selector: dict[str, str] = Field(
        default_factory=lambda: {"app": "redis"},
        description="Pod labels, all of which a managed Redis pod has; must not be empty.",
    )
    labels: LabelKeys = Field(
        default=LabelKeys(), description="Pod labels naming a pod's Redis cluster, shard and role."
    )
    topology: TopologyKeys = Field(
        default=TopologyKeys(), description="Node labels naming a node's zone, rack and host."
    )
    rules: Rules = Field(default=Rules(), description="The hard rules and their strength.")
    weights: Weights = Field(
        default=Weights(),
        description="Costs of the soft terms (docs/objective.md); 0 turns one off.",
    )
    solver: SolverOptions = Field(
        default=SolverOptions(), description="CP-SAT's budget and search."
    )
    permit: Permit = Field(
        default=Permit(), description="When the binder lets a shard's pending pods into a solve."
    )
    degradation: Degradation = Field(
        default=Degradation(), description="What a plan may give up when the rules cannot all hold."
    )
    redis: RedisAccess = Field(
        default=RedisAccess(),
        description="How `rebalance` and `drill` reach Redis (`--apply`, `--roles redis`).",
    )
    identity: Identity = Field(
        default=Identity(),
        description="How a pod's Redis cluster, shard, role and shard size are read: a "
        "deployment's profile (docs/profiles), or a formation of your own.",
    )

    @model_validator(mode="before")
    @classmethod
    def _profile(cls, data: object) -> object:
        """``identity.profile`` fills in what the file leaves out (models.identity.profiles)."""
        return with_profile(data) if isinstance(data, Mapping) else data

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
        if self.identity.formation == "leader-follower" and self.identity.formation_role is None:
            raise ValueError(
                "identity.formationRole must name the label that tells leaders from followers "
                "(identity.formation is leader-follower)"
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
