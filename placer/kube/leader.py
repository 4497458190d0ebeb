"""One active binder at a time, through a ``coordination.k8s.io/v1`` Lease.

The client's shipped ``kubernetes.leaderelection`` cannot serve here: its loops sleep with
``time.sleep`` and never look at a stop signal, it never releases the lease on shutdown (the
standby then waits a whole lease duration), ``LeaseLock`` always uses the global default
client rather than ours, and a bad config calls ``sys.exit``. This module follows the same
protocol as client-go (holderIdentity, leaseDurationSeconds, acquire/renew times, transitions,
expiry judged by the local clock since the record last changed, release by clearing the holder),
so it interoperates with client-go candidates, and stops within one retry period.
"""

import copy
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes.client import ApiClient

log = logging.getLogger(__name__)

LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


@dataclass(frozen=True)
class LeaderConfig:
    """client-go's defaults: 15 s lease, give up renewing after 10 s, retry every 2 s."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    jitter: float = 1.2
    watch_period: float = 0.5
    """How often a standby reads a Lease another holds: it sees the holder's last renewal
    within this, and takes over within ``lease_duration`` + this of it (a round is due the
    moment the Lease expires by its clock). client-go reads it every ``retry_period``."""

    def __post_init__(self) -> None:
        if self.retry_period <= 0:
            raise ValueError("retry_period must be positive")
        if self.renew_deadline <= self.jitter * self.retry_period:
            raise ValueError("renew_deadline must exceed jitter * retry_period")
        if self.watch_period <= 0:
            raise ValueError("watch_period must be positive")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                "lease_duration must exceed renew_deadline, or two leaders could overlap"
            )


class LeaseError(RuntimeError):
    """The Lease could not be read or written for a reason other than a lost race."""


class LeaseUnusable(LeaseError):
    """The Lease cannot be used as configured and no retry will change that: its namespace does
    not exist, or RBAC denies the binder's account. The message says what to do."""


class LeaseClient(Protocol):
    """Get/create/replace one Lease; create/replace return None when another writer won (409)."""

    def get(self) -> dict[str, Any] | None: ...

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None: ...

    def replace(self, body: dict[str, Any]) -> dict[str, Any] | None: ...


class ApiLeaseClient:
    """``LeaseClient`` over an ``ApiClient``.

    Sends raw JSON rather than ``V1Lease`` models: Lease times are MicroTime, which the server
    parses only with exactly six fraction digits, and the client's models drop them when zero.
    """

    def __init__(
        self, api_client: ApiClient, namespace: str, name: str, request_timeout: float = 10.0
    ) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.name = name
        self.request_timeout = request_timeout

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        query: list[tuple[str, str]] | None = None,
    ) -> tuple[int, Any]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            params = self.api_client.param_serialize(
                method=method,
                resource_path=path,
                query_params=query,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = self.api_client.call_api(*params, _request_timeout=self.request_timeout)
            raw = resp.read()
        except Exception as exc:  # connection refused, timeouts, TLS: all transient here
            raise LeaseError(f"{method} lease {self.namespace}/{self.name}: {exc}") from exc
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = None
        return int(resp.status), data

    def _path(self, named: bool) -> str:
        base = LEASES_PATH.format(namespace=self.namespace)
        return f"{base}/{self.name}" if named else base

    def _check(self, method: str, status: int, data: Any) -> dict[str, Any] | None:
        if 200 <= status < 300 and isinstance(data, dict):
            return data
        if status == 409:
            return None
        message = data.get("message", "") if isinstance(data, dict) else ""
        where = f"{method} lease {self.namespace}/{self.name}"
        if status == 403:
            raise LeaseUnusable(
                f"{where}: forbidden (HTTP 403 {message}): grant the binder's service account "
                f"get, create and update on leases in namespace {self.namespace} (deploy/ has "
                "the Role), or pass --lease-namespace naming a namespace where it has them"
            )
        if status == 404 and method == "POST":
            raise LeaseUnusable(
                f"{where}: namespace {self.namespace} does not exist: create it (kubectl "
                f"create namespace {self.namespace}) or pass --lease-namespace naming one "
                "that exists (the binder's own namespace, for one)"
            )
        raise LeaseError(f"{where}: HTTP {status} {message}")

    def probe(self) -> None:
        """Check at start-up, without writing, that rounds can use the Lease: read it, then
        create it (or replace it) as a server-side dry run. Raises ``LeaseUnusable`` when they
        never could, ``LeaseError`` when the server could not answer (the campaign retries)."""
        lease = self.get()
        dry = [("dryRun", "All")]
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {},
            }
            status, data = self._request("POST", self._path(False), body, dry)
            if status != 409:  # 409: created meanwhile, so the namespace exists
                self._check("POST", status, data)
            return
        status, data = self._request("PUT", self._path(True), lease, dry)
        if status not in (404, 409):  # deleted or changed meanwhile: a round sorts that out
            self._check("PUT", status, data)

    def get(self) -> dict[str, Any] | None:
        status, data = self._request("GET", self._path(True))
        if status == 404:
            return None
        return self._check("GET", status, data)

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        status, data = self._request("POST", self._path(False), body)
        return self._check("POST", status, data)

    def replace(self, body: dict[str, Any]) -> dict[str, Any] | None:
        status, data = self._request("PUT", self._path(True), body)
        if status == 404:  # deleted under us: another round will create it
            return None
        return self._check("PUT", status, data)


def lease_api_client(api_client: ApiClient) -> ApiClient:
    """A client for the Lease alone, on the same server and credentials, without the HTTP
    client's own retries: a renewal that gets no answer is given up at its timeout and the
    next round starts afresh, rather than a retry waiting out a second timeout (with etcd
    stopped, a read retried that way outlasted the Lease)."""
    configuration = copy.copy(api_client.configuration)
    configuration.retries = False
    return ApiClient(configuration)


LEASE_REQUEST_TIMEOUT = 2.5
"""Seconds one Lease request may take: a quarter of the renew deadline, so a renewal sent
while the server could not answer ends in time for rounds to renew before the deadline."""


def micro_time(moment: datetime) -> str:
    """RFC 3339 with exactly six fraction digits, as the API's MicroTime requires."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for, renews and releases one Lease. ``run`` drives it; the rest is testable alone."""

    def __init__(
        self,
        client: LeaseClient,
        identity: str,
        config: LeaderConfig | None = None,
        *,
        namespace: str = "",
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        self.client = client
        self.identity = identity
        self.config = config or LeaderConfig()
        self.namespace = namespace or str(getattr(client, "namespace", ""))
        self.name = name or str(getattr(client, "name", ""))
        self.clock = clock
        self.wall_clock = wall_clock
        self._observed_version: str | None = None
        self._observed_at = 0.0
        self._observed_duration = self.config.lease_duration
        self._leader = threading.Event()
        self._renewed_at = float("-inf")
        """When this candidate last took or renewed the Lease (``clock``)."""
        self._poked = threading.Event()
        self.holder: str | None = None  # last holder seen in the Lease
        self._last_error: str | None = None

    @property
    def is_leader(self) -> bool:
        """Leads now: from taking the Lease until it is given up, and never more than
        ``renew_deadline`` after the last renewal, even while a round is still waiting for a
        server that does not answer (a request and its client's retries can outlast the Lease:
        a standby may hold it by then)."""
        return (
            self._leader.is_set() and self.clock() - self._renewed_at < self.config.renew_deadline
        )

    def _observe(self, lease: dict[str, Any]) -> None:
        version = str((lease.get("metadata") or {}).get("resourceVersion", ""))
        if version != self._observed_version:
            self._observed_version = version
            self._observed_at = self.clock()
        spec = lease.get("spec") or {}
        self.holder = spec.get("holderIdentity") or None
        self._observed_duration = float(
            spec.get("leaseDurationSeconds") or self.config.lease_duration
        )

    def expires_in(self) -> float | None:
        """Seconds until the Lease another candidate holds expires by our clock; None when no
        other holder was seen."""
        if self.holder is None or self.holder == self.identity:
            return None
        return self._observed_at + self._observed_duration - self.clock()

    def next_round_in(self) -> float:
        """Seconds to the next round: the retry period (with jitter when not leading), or,
        while another holds the Lease, ``watch_period`` and never past its expiry."""
        config = self.config
        if self._leader.is_set():
            # A renewal that failed is tried again soon: leadership lapses at the deadline.
            return config.retry_period if self._last_error is None else config.watch_period
        period = config.retry_period * (1 + random.random() * (config.jitter - 1))
        expires = self.expires_in()
        if expires is not None:  # a standby: watch closely, and be there at expiry
            period = min(period, config.watch_period, max(expires, 0.0) + 0.01)
        return period

    def poke(self) -> None:
        """Try a round now (the API server answers again) rather than after the period."""
        self._poked.set()

    def _wait(self, seconds: float, stop_event: threading.Event) -> None:
        deadline = self.clock() + seconds
        while not (stop_event.is_set() or self._poked.is_set()):
            left = deadline - self.clock()
            if left <= 0:
                break
            self._poked.wait(min(left, 0.1))
        self._poked.clear()

    def try_acquire_or_renew(self) -> bool:
        """One round: True if this candidate holds the Lease afterwards."""
        try:
            lease = self.client.get()
            stamp = micro_time(self.wall_clock())
            if lease is None:
                created = self.client.create(self._new_lease(stamp))
                self._recovered()
                if created is None:
                    return False
                self._observe(created)
                self._renewed_at = self.clock()
                return True
            self._observe(lease)
            spec = dict(lease.get("spec") or {})
            holder = spec.get("holderIdentity") or ""
            duration = float(spec.get("leaseDurationSeconds") or self.config.lease_duration)
            if holder and holder != self.identity and self.clock() < self._observed_at + duration:
                self._recovered()
                return False  # held by another and not expired by our clock
            if holder != self.identity:
                spec["acquireTime"] = stamp
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["holderIdentity"] = self.identity
            spec["leaseDurationSeconds"] = max(1, round(self.config.lease_duration))
            spec["renewTime"] = stamp
            updated = self.client.replace({**lease, "spec": spec})
        except LeaseError as exc:
            self._failed(exc)
            return False
        self._recovered()
        if updated is None:
            return False
        self._observe(updated)
        self._renewed_at = self.clock()
        return True

    def _failed(self, exc: LeaseError) -> None:
        """Say a failure once, not every retry: again only when it changes. A Lease that can
        never be used is an error with its remedy; nothing is bound until it is fixed."""
        text = str(exc)
        if text == self._last_error:
            log.debug("leader election: still failing: %s", text)
            return
        self._last_error = text
        if isinstance(exc, LeaseUnusable):
            log.error("leader election: %s; no pod is bound until this is fixed", text)
        else:
            log.warning(
                "leader election: %s (retrying every %gs; said again only if it changes)",
                text,
                self.config.retry_period,
            )

    def _recovered(self) -> None:
        if self._last_error is not None:
            log.info("leader election: lease %s/%s answers again", self.namespace, self.name)
            self._last_error = None

    def _new_lease(self, stamp: str) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }

    def release(self) -> bool:
        """Give the Lease up now (standbys take over at once rather than after it expires)."""
        try:
            lease = self.client.get()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            stamp = micro_time(self.wall_clock())
            spec = dict(lease.get("spec") or {})
            spec.pop("holderIdentity", None)
            spec.update(leaseDurationSeconds=1, acquireTime=stamp, renewTime=stamp)
            released = self.client.replace({**lease, "spec": spec}) is not None
        except LeaseError as exc:
            log.warning("leader election: release failed: %s", exc)
            return False
        if released:
            log.info("leader election: %s released lease %s", self.identity, self.name)
        return released

    def run(
        self,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
        stop_event: threading.Event,
    ) -> None:
        """Campaign until ``stop_event`` is set; then release the Lease if held.

        ``on_started``/``on_stopped`` are notifications called in this thread and must not
        block: the caller's own loop does the work while ``is_leader`` holds. Leadership is
        given up (``on_stopped``) when renewal has failed for ``renew_deadline``, before the
        Lease can expire for anyone else, or at once when another holder is seen. After
        losing it, the candidate campaigns again.
        """
        config = self.config
        last_renew = 0.0
        try:
            while not stop_event.is_set():
                held = self.try_acquire_or_renew()
                now = self.clock()
                if held:
                    last_renew = now
                    if not self._leader.is_set():
                        log.info("leader election: %s leads %s", self.identity, self.name)
                        self._leader.set()
                        on_started()
                elif self._leader.is_set() and (
                    (self.holder is not None and self.holder != self.identity)
                    or now - last_renew >= config.renew_deadline
                ):
                    log.warning("leader election: %s lost lease %s", self.identity, self.name)
                    self._leader.clear()
                    on_stopped()
                self._wait(self.next_round_in(), stop_event)
        finally:
            if self._leader.is_set():
                self._leader.clear()
                self.release()
                on_stopped()


def run_with_leader_election(
    api_client: ApiClient,
    namespace: str,
    lease_name: str,
    identity: str,
    on_started: Callable[[], None],
    on_stopped: Callable[[], None],
    stop_event: threading.Event,
    config: LeaderConfig | None = None,
) -> None:
    """Block, campaigning for ``namespace/lease_name``, until ``stop_event`` is set."""
    elector = LeaderElector(
        ApiLeaseClient(api_client, namespace, lease_name),
        identity,
        config,
        namespace=namespace,
        name=lease_name,
    )
    elector.run(on_started, on_stopped, stop_event)


class LeaseOnDemand:
    """Holds the Lease only while its owner has work, for binders run without leader election.

    Two such binders started by mistake never write at once: each takes the Lease when it has
    pods to place and gives it up once idle for ``idle_release`` seconds, and a binder that
    takes it over lists the cluster again first (the caller's job: ``held`` turning true).
    A leader-elected binder holding the same Lease keeps every on-demand one out.
    """

    def __init__(self, elector: LeaderElector, idle_release: float = 1.0) -> None:
        self.elector = elector
        self.idle_release = idle_release
        self._wanted = threading.Event()
        self._changed = threading.Event()

    @property
    def held(self) -> bool:
        return self.elector.is_leader

    def want(self, wanted: bool) -> None:
        """Say whether there is work; wanting it again wakes the campaign at once."""
        if wanted and not self._wanted.is_set():
            self._wanted.set()
            self._changed.set()
        elif not wanted:
            self._wanted.clear()

    def run(self, stop_event: threading.Event) -> None:
        """Campaign while wanted, renew while held, release when idle; until ``stop_event``."""
        elector, config = self.elector, self.elector.config
        last_renew = 0.0
        idle_since: float | None = None
        try:
            while not stop_event.is_set():
                now = elector.clock()
                if self._wanted.is_set():
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                keep = self._wanted.is_set() or (
                    self.held and idle_since is not None and now - idle_since < self.idle_release
                )
                if keep:
                    if elector.try_acquire_or_renew():
                        last_renew = now
                        if not self.held:
                            log.info("lease: %s took %s", elector.identity, elector.name)
                            elector._leader.set()
                    elif self.held and (
                        (elector.holder is not None and elector.holder != elector.identity)
                        or now - last_renew >= config.renew_deadline
                    ):
                        log.warning("lease: %s lost %s", elector.identity, elector.name)
                        elector._leader.clear()
                    period = config.retry_period if self.held else config.retry_period / 2
                elif self.held:
                    elector._leader.clear()
                    elector.release()
                    period = config.retry_period
                else:
                    period = config.retry_period
                self._changed.clear()
                deadline = elector.clock() + period
                while not (stop_event.is_set() or self._changed.is_set()):
                    left = deadline - elector.clock()
                    if left <= 0:
                        break
                    self._changed.wait(min(left, 0.1))
        finally:
            if self.held:
                elector._leader.clear()
                elector.release()
