"""The binder's settings and their defaults, shared by every part of the binder.

Its own module so the parts (reading, holding, solving, writing, reporting) can read the
settings without importing the loop that composes them.
"""

from dataclasses import dataclass
from typing import Literal

from placer.binder.background import DEFAULT_QPS

Enforce = Literal["bind", "gate"]
PLACEMENT_GATE = "redis-placer.io/placement"
DEFAULT_BINDER_TIME_LIMIT = 5.0
"""Per-batch solve budget of ``redis-placer binder`` (docs/benchmarks.md has the trade-off)."""
DEFAULT_CONCURRENCY = 32
"""Shards written at once (one request in flight each), as kube-scheduler binds in parallel."""
DEFAULT_BATCH_SECONDS = 0.5
"""How long one batch's solve should take: the first shards bind about this soon."""
DEFAULT_MAX_BATCH_PODS = 600
DEFAULT_RELATIVE_GAP = 0.01
"""A batch's solve stops once its placement is proven within 1% of the best possible: proving
the last fraction of a percent took most of a 5 s budget on batches of a hundred shards."""
DEFAULT_SCHEDULER_QPS = 50.0
"""Gate mode: how many pins kube-scheduler binds a second (its client's default --kube-api-qps:
one Binding per pod). Pins waiting for it are work in the pipeline like the binder's own."""
FIRST_SECONDS_PER_POD = {"cp-sat": 0.005, "greedy": 0.002}
"""What a pending pod costs the solver, until its own solves say (then an average of them): a
first batch of about 100 pods for CP-SAT, where a solve's fixed cost is not paid for a handful
(docs/benchmarks.md, On a real API server)."""


SWITCH_INTERVAL = 0.02
"""Seconds a thread of the binder may run before one waiting for the interpreter must be let in
(Python's default: 0.005). The binder is one thread that computes (reads, solves) and dozens that
mostly wait for the API server; at the default, each of their responses soon takes the
interpreter from the computing thread, and the hand-overs cost CPU of their own. Five
alternating pairs of bind-mode runs of 1,500 pods on a real API server: 0.82 ms of CPU a pod
beyond a placer that decides nothing at the default, 0.67 ms at 0.02, shard p50 medians 0.79
and 0.84 s (docs/benchmarks.md, The cost of deciding)."""


BINDER_PROOF_FIRST = 0.02
"""A batch's level one searches this long (deterministic seconds) for a proof before the gap
may stop it; the plan's own default (``solver.levels.model.PROOF_FIRST``) is 0.05. On 1,000
nodes, batches of 300 pods, the same plans as with 0.05 and a third of the zone model's time
where it is not proven at once (docs/benchmarks.md, the binder in memory)."""


@dataclass(frozen=True)
class BinderConfig:
    enforce: Enforce = "bind"
    gate: str = PLACEMENT_GATE
    namespace: str | None = None
    """Watch one namespace only; None watches all (capacity needs every pod on a node)."""
    solver: Literal["cp-sat", "greedy"] = "cp-sat"
    time_limit: float | None = None
    """Per-solve limit; None uses the policy's solver.timeLimitSeconds."""
    retry_base_seconds: float = 1.0
    retry_max_seconds: float = 60.0
    node_refresh_seconds: float = 30.0
    """How often StatefulSets (and, without a node watch, nodes) are listed again."""
    concurrency: int = DEFAULT_CONCURRENCY
    batch_seconds: float = DEFAULT_BATCH_SECONDS
    max_batch_pods: int = DEFAULT_MAX_BATCH_PODS
    relative_gap: float | None = None
    """CP-SAT stops within this share of its bound; None uses the policy's solver.relativeGap."""
    event_qps: float = DEFAULT_QPS
    manage_pdbs: bool = False
    """Create a PodDisruptionBudget for each shard placed, delete it with the shard."""
    recreate_refused: bool = False
    """Gate mode: delete a never-started pod whose pin kube-scheduler refused (refusals.py)."""
    proof_first: float = BINDER_PROOF_FIRST
    """Deterministic seconds level one seeks a proof before its gap may stop it."""
    scheduler_qps: float = DEFAULT_SCHEDULER_QPS
    """Gate mode: kube-scheduler's binding rate, for how long the pins it holds keep it busy."""
