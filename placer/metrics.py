"""Prometheus metrics and the small HTTP server for /metrics, /healthz and /readyz.

Metrics live in their own ``CollectorRegistry`` (not the process-global one) so tests and
several instances never collide, and a CronJob can push exactly this set to a Pushgateway.
"""

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import push_to_gateway as _push_to_gateway
from prometheus_client.exposition import choose_encoder

log = logging.getLogger(__name__)

PREFIX = "redis_placer_"
SOLVE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
PERMIT_DECISIONS = ("allow", "wait", "reject")
BIND_RESULTS = ("bound", "conflict", "gone", "error")


GUARD_DECISIONS = ("allow", "handover", "wait", "released", "unjudged")


class Metrics:
    """Every metric redis-placer exports, registered in ``self.registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.solve_duration = Histogram(
            PREFIX + "solve_duration_seconds",
            "Wall time of one placement solve.",
            ["mode"],
            buckets=SOLVE_BUCKETS,
            registry=r,
        )
        self.solves = Counter(PREFIX + "solves", "Solves by solver status.", ["status"], registry=r)
        self.permit_decisions = Counter(
            PREFIX + "permit_decisions",
            "Permit-gate decisions on pending pods.",
            ["decision"],
            registry=r,
        )
        self.pending_pods = Gauge(
            PREFIX + "pending_pods", "Managed pods waiting for a node.", registry=r
        )
        self.gated_pods = Gauge(
            PREFIX + "gated_pods", "Managed pods held by the scheduling gate.", registry=r
        )
        self.binds = Counter(PREFIX + "binds", "Bind attempts by result.", ["result"], registry=r)
        self.bind_errors = Counter(
            PREFIX + "bind_errors", "Failed binds or pins by reason.", ["reason"], registry=r
        )
        self.violations = Gauge(
            PREFIX + "violations",
            "Placement-rule violations in the current cluster state.",
            ["rule", "severity"],
            registry=r,
        )
        self.worst_domain_loss_ratio = Gauge(
            PREFIX + "worst_domain_loss_ratio",
            "Largest fraction of one Redis cluster's masters that losing a single domain at "
            "this level would take down.",
            ["level"],
            registry=r,
        )
        self.deferred_dropped = Counter(
            PREFIX + "deferred_writes_dropped",
            "Events and role labels dropped because the background queue was full.",
            ["kind"],
            registry=r,
        )
        self.leader = Gauge(
            PREFIX + "leader", "1 while this replica holds the leader Lease.", registry=r
        )
        self.cluster_readable = Gauge(
            PREFIX + "cluster_readable",
            "1 while the binder's view of the cluster is current: its last list succeeded and "
            "no watch, list or write has failed since; /readyz follows it.",
            registry=r,
        )
        self.cluster_unreadable = Counter(
            PREFIX + "cluster_unreadable",
            "Times the binder's view of the cluster was lost (a watch broken, a list failed, a "
            "write the server did not answer) and no decision was made until a list succeeded.",
            registry=r,
        )
        self.watch_expired = Counter(
            PREFIX + "watch_expired",
            "Watches that ended with 410 Gone (their version too old) and were listed again.",
            ["watch"],
            registry=r,
        )
        self.last_solve_timestamp = Gauge(
            PREFIX + "last_solve_timestamp_seconds",
            "Unix time of the last finished solve.",
            registry=r,
        )
        self.guard_admissions = Counter(
            PREFIX + "guard_admissions",
            "Evictions and deletes of Redis pods the maintenance guard answered, by decision "
            "(allow, handover, wait, released: let through after the longest hold, unjudged: let "
            "through unchecked, its shard not read).",
            ["decision"],
            registry=r,
        )
        self.handovers = Counter(
            PREFIX + "handovers",
            "Master roles the guard handed over (CLUSTER FAILOVER), by why (maintenance, "
            "restore) and outcome (ok, failed).",
            ["why", "outcome"],
            registry=r,
        )
        self.survival_broken = Gauge(
            PREFIX + "survival_broken",
            "1 while losing one domain at this level (host, rack, zone) would take a shard or a "
            "Redis cluster's master majority, as the running placement stands.",
            ["level"],
            registry=r,
        )
        # Known label values start at zero so rate() and absence alerts work from the start.
        for decision in GUARD_DECISIONS:
            self.guard_admissions.labels(decision=decision)
        for decision in PERMIT_DECISIONS:
            self.permit_decisions.labels(decision=decision)
        for result in BIND_RESULTS:
            self.binds.labels(result=result)
        for watch in ("pods", "nodes"):
            self.watch_expired.labels(watch=watch)
        self._violation_keys: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def observe_solve(self, mode: str, status: str, seconds: float) -> None:
        self.solve_duration.labels(mode=mode).observe(seconds)
        self.solves.labels(status=status).inc()
        self.last_solve_timestamp.set_to_current_time()

    def permit(self, decision: str, count: int = 1) -> None:
        if decision not in PERMIT_DECISIONS:
            raise ValueError(f"permit decision must be one of {PERMIT_DECISIONS}, not {decision!r}")
        self.permit_decisions.labels(decision=decision).inc(count)

    def bind(self, result: str, reason: str | None = None) -> None:
        """Count one bind/pin attempt; a non-bound result with a reason also counts an error."""
        self.binds.labels(result=result).inc()
        if reason and result != "bound":
            self.bind_errors.labels(reason=reason).inc()

    def set_violations(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the violation gauges: a (rule, severity) fixed since last time drops to 0."""
        with self._lock:
            for key in self._violation_keys - set(counts):
                self.violations.labels(rule=key[0], severity=key[1]).set(0)
            for (rule, severity), value in counts.items():
                self.violations.labels(rule=rule, severity=severity).set(value)
            self._violation_keys |= set(counts)

    def set_worst_domain_loss(self, ratios: Mapping[str, float]) -> None:
        for level, ratio in ratios.items():
            self.worst_domain_loss_ratio.labels(level=level).set(ratio)


class Readiness:
    """Named conditions that must all hold for /readyz to answer 200 (e.g. ``snapshot``)."""

    def __init__(self, *required: str) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, bool] = dict.fromkeys(required, False)

    def set(self, name: str, ok: bool = True) -> None:
        with self._lock:
            self._state[name] = ok

    def missing(self) -> list[str]:
        with self._lock:
            return sorted(name for name, ok in self._state.items() if not ok)

    @property
    def ready(self) -> bool:
        return not self.missing()


def _handler(
    registry: CollectorRegistry, readiness: Readiness, alive: Callable[[], bool]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "redis-placer"

        def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._send(200, encoder(registry), content_type)
            elif path in ("/healthz", "/livez"):
                if alive():
                    self._send(200, b"ok\n")
                else:
                    self._send(503, b"unhealthy\n")
            elif path == "/readyz":
                missing = readiness.missing()
                if missing:
                    self._send(503, ("not ready: " + ", ".join(missing) + "\n").encode())
                else:
                    self._send(200, b"ok\n")
            else:
                self._send(404, b"not found\n")

        do_HEAD = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s", format % args)

    return Handler


class MetricsServer:
    """Serves /metrics, /healthz (process alive) and /readyz (all readiness conditions hold)."""

    def __init__(
        self,
        metrics: Metrics,
        port: int = 9090,
        host: str = "0.0.0.0",
        readiness: Readiness | None = None,
        alive: Callable[[], bool] = lambda: True,
    ) -> None:
        self.metrics = metrics
        self.readiness = readiness if readiness is not None else Readiness("started")
        self._server = ThreadingHTTPServer(
            (host, port), _handler(metrics.registry, self.readiness, alive)
        )
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._server.server_address[1])

    def set_ready(self, ok: bool = True, condition: str = "started") -> None:
        self.readiness.set(condition, ok)

    def start(self) -> "MetricsServer":
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "MetricsServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def push_to_gateway(
    url: str,
    job: str,
    registry: CollectorRegistry,
    grouping_key: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> bool:
    """Push ``registry`` to a Pushgateway (replacing the job's group); False, logged, on failure.

    A CronJob run should not fail because monitoring is down, so errors are not raised.
    """
    try:
        _push_to_gateway(
            url, job=job, registry=registry, grouping_key=dict(grouping_key or {}), timeout=timeout
        )
    except OSError as exc:  # URLError and HTTPError are OSErrors
        log.warning("push to gateway %s failed: %s", url, exc)
        return False
    return True


def metric_names(registry: CollectorRegistry) -> Iterable[str]:
    """Names of the metric families in ``registry`` (as registered, without _total)."""
    return [family.name for family in registry.collect()]
