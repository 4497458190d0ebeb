"""The plan: what the solver decided, in the JSON contract other tools read."""

from typing import Literal

from pydantic import Field

from models.base import Wire

Status = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "MODEL_INVALID"]
Action = Literal["keep", "place", "move"]
Severity = Literal["hard", "soft"]
Mode = Literal["place", "rebalance"]
Engine = Literal["cp-sat", "greedy"]


class Assignment(Wire):
    pod: str
    node: str | None
    role: Literal["master", "replica"]
    cluster: str
    shard: str
    action: Action
    from_node: str | None = None
    """Where a moved pod runs now."""


class Failover(Wire):
    cluster: str
    shard: str
    from_: str = Field(alias="from")
    to: str


class Unplaced(Wire):
    pod: str
    reason: str


class Violation(Wire):
    rule: str
    severity: Severity
    pods: list[str] = []
    nodes: list[str] = []
    message: str


class DomainLoss(Wire):
    """The worst single failure at one topology level."""

    level: str
    domain: str | None
    master_loss_ratio: float
    """Largest share of one Redis cluster's masters that this failure takes down."""
    cluster: str | None = None
    shards_lost: int = 0
    """Shards left with no member alive."""


class DomainTakes(Wire):
    """One domain whose loss alone takes a Redis cluster's master majority or whole shards."""

    domain: str | None
    cluster: str
    masters: int
    """The cluster's masters in all."""
    masters_left: int
    """Its masters still alive after this domain's loss (a majority is strictly more than half)."""
    shards_lost: list[str] = []
    """Its shards left with no member alive."""

    @property
    def majority_lost(self) -> bool:
        return 2 * self.masters_left <= self.masters


class LevelVerdict(Wire):
    """Whether every Redis cluster survives the loss of any one domain at one level."""

    level: str
    domains: int
    """Domains at this level that hold a Redis pod of the placement."""
    survived: bool
    severity: Severity
    """``hard`` at the level ``rules.survive`` names, ``soft`` (a finding) elsewhere."""
    takes: list[DomainTakes] = []
    """Each domain whose loss takes some cluster's master majority or a whole shard."""
    cannot_survive: list[str] = []
    """Per Redis cluster that no placement on these domains could keep through the loss of one:
    why, and what would (more shards, more domains, a replica)."""
    lost_already: list[str] = []
    """What is lost before any failure (a shard with no member alive, a cluster already short
    of a master majority): then nothing survives, and ``takes`` leaves these out."""
    label: str = ""
    """The node label that names this level's domains (policy topology)."""
    unlabelled: list[str] = []
    """Nodes without ``label`` that hold a Redis pod or would take new pods but for it: which
    domain each is in is unknown, so no domain count here proves what a placement could do."""
    unlabelled_running: list[str] = []
    """Those of ``unlabelled`` that hold a Redis pod of the placement: their domain is unknown,
    so the level cannot be judged survivable (a loss found among the known domains stands)."""

    @property
    def judged(self) -> bool:
        """Something runs to judge (a Redis pod on a node of the snapshot, or a loss to name),
        and no Redis pod is on a node whose domain is unknown, unless a loss is found anyway:
        an unknown level is neither survived nor broken."""
        if self.lost_already or self.takes:
            return True
        return self.domains > 0 and not self.unlabelled_running


class SkippedInput(Wire):
    object: str
    message: str
    severity: str = "error"


class Plan(Wire):
    status: Status
    engine: Engine = "greedy"
    """Whose placement this is: CP-SAT's own (possibly started from greedy's) or the greedy
    baseline, which a solve returns when CP-SAT found nothing better."""
    mode: Mode = "place"
    degraded: bool = False
    objective: float = 0
    bound: float = 0
    gap: float = 0
    unplaced_bound: int | None = None
    """No plan leaves fewer of the placeable pending pods unplaced (proven lower bound); None
    when nothing is proven."""
    solve_seconds: float = 0.0
    assignments: list[Assignment] = []
    failovers: list[Failover] = []
    unplaced: list[Unplaced] = []
    violations: list[Violation] = []
    broken_rules: list[str] = []
    """Required rules relaxed to find a plan (only when degraded)."""
    explanation: list[str] = []
    """Why some pods cannot be placed, in words."""
    worst_domain_loss: list[DomainLoss] = []
    survival: list[LevelVerdict] = []
    """Per level (host, rack, zone) in use: does every Redis cluster keep each shard and a master
    majority through the loss of any one domain, and which domain takes what when not."""
    skipped: list[SkippedInput] = []
    objective_terms: dict[str, float] = {}
    bound_note: str | None = None
    """Set when a solve proved a bound for part of the problem only (rebalance re-solving the
    shards at fault with the rest fixed): what that bound is and what it speaks of. ``bound``
    then holds only what is proven for the whole."""
    stay_reasons: dict[str, str] = {}
    """Rebalance: shard key -> why a hard violation it is part of stays after this plan's changes
    (the cap, no room, or the rules), as the greedy repair found."""
    warnings: list[str] = []
    """Odd but usable input and risks no rule covers (a Redis cluster with fewer than 3
    masters), in words; the command line also prints them on stderr."""

    @property
    def hard_violations(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "hard"]

    def to_json_dict(self) -> dict[str, object]:
        return self.model_dump(mode="json", by_alias=True)
