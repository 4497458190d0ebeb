"""Redis Cluster admin calls used by rebalance: read the topology, run a manual failover.

Why a wrapper over redis-py: its errors are many and its parsed forms vary by version;
the rebalance executor needs a few exact facts (who is master of whom, is the
replication link up) and a few clear failure kinds, each one line that names the
endpoint and never the password.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import redis
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = [
    "DEFAULT_IO_TIMEOUT_S",
    "ClusterNodeInfo",
    "ClusterNodesParseError",
    "FailoverRefused",
    "FailoverResult",
    "FailoverTimeout",
    "NotAReplica",
    "PasswordSourceError",
    "RedisAuthError",
    "RedisCommandError",
    "RedisEndpoint",
    "RedisOpsError",
    "RedisTls",
    "RedisTlsError",
    "RedisUnreachable",
    "cluster_info",
    "failover_to",
    "info_replication",
    "parse_cluster_nodes",
    "password_from_env_or_file",
    "read_cluster_nodes",
]

DEFAULT_IO_TIMEOUT_S = 5.0
Role = Literal["master", "replica", "unknown"]


class RedisTls(BaseModel):
    """How to speak TLS to Redis, as the deployment's own clients do.

    The server is verified against ``ca_pem`` (the CA of the deployment's TLS Secret), never
    trusted blindly. The host name is not checked by default: the operators' certificates name
    services and pod DNS names, and the tool dials pod IPs. ``cert_file`` / ``key_file`` are
    shown when the servers ask for a client certificate (``tls-auth-clients``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ca_pem: str | None = None
    """PEM of the CA that signs the servers; None: the system's trusted CAs."""
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = False
    source: str = ""
    """Where the material came from (a Secret's name), for messages."""


class RedisEndpoint(BaseModel):
    """Where one Redis node answers. The password is a SecretStr: repr and JSON mask it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(min_length=1)
    port: int = Field(default=6379, ge=1, le=65535)
    password: SecretStr | None = None
    username: str | None = None
    tls: RedisTls | None = None

    def at(self, host: str, port: int) -> RedisEndpoint:
        """Another node of the same cluster: the same credentials and TLS, another address."""
        return self.model_copy(update={"host": host, "port": port})

    @property
    def address(self) -> str:
        """``host:port`` (IPv6 hosts in brackets), the form used in every message."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return self.address


class ClusterNodeInfo(BaseModel):
    """One line of ``CLUSTER NODES``, as seen by the node that was asked."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_id: str
    ip: str
    port: int
    bus_port: int | None = None
    hostname: str | None = None
    flags: tuple[str, ...]
    role: Role
    master_id: str | None = None
    myself: bool = False
    connected: bool
    failed: bool = False  # "fail": a majority of masters agreed it is down
    suspected: bool = False  # "fail?": this observer cannot reach it (PFAIL)
    handshake: bool = False
    config_epoch: int = 0
    slots: tuple[tuple[int, int], ...] = ()

    @property
    def address(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"

    @property
    def slot_count(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.slots)

    @property
    def healthy(self) -> bool:
        """Connected and not flagged failing by anyone this observer believes."""
        return self.connected and not (self.failed or self.suspected or self.handshake)


class FailoverResult(BaseModel):
    """What ``failover_to`` did: ``performed`` is False when the target already led."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    performed: bool
    new_master_id: str
    old_master_id: str | None
    seconds: float


# -- errors -----------------------------------------------------------------------------


class RedisOpsError(Exception):
    """Base of every error here: one line, naming the endpoint, never the password."""

    def __init__(self, endpoint: RedisEndpoint | str, message: str) -> None:
        self.endpoint = str(endpoint)
        self.detail = message
        super().__init__(f"redis {self.endpoint}: {message}")


class RedisUnreachable(RedisOpsError):
    """No TCP connection, or no answer within the timeout."""


class RedisAuthError(RedisOpsError):
    """The node refused our credentials (WRONGPASS, NOAUTH, no password configured)."""


class RedisTlsError(RedisOpsError):
    """The TLS handshake failed: a certificate that does not verify, or no TLS on the port."""


class RedisCommandError(RedisOpsError):
    """The node answered a command with an error we do not map to a specific kind."""


class FailoverRefused(RedisCommandError):
    """The replica rejected ``CLUSTER FAILOVER`` (e.g. its master is down or failing)."""


class FailoverTimeout(RedisOpsError):
    """The failover did not reach its end state in time.

    Redis itself abandons a manual failover that cannot start within 5 s; a
    timeout above that is therefore a failover that did not happen or has not settled.
    """


class NotAReplica(RedisOpsError):
    """The failover target is not a replica (of the expected master)."""


class ClusterNodesParseError(RedisOpsError, ValueError):
    """A ``CLUSTER NODES`` line that does not have the documented shape."""


class PasswordSourceError(ValueError):
    """A configured password file cannot be read."""


# -- connections and error mapping ------------------------------------------------------


def _scrub(text: str, endpoint: RedisEndpoint) -> str:
    """Defense in depth: never let the password through, whatever a library prints."""
    if endpoint.password is not None:
        secret = endpoint.password.get_secret_value()
        if secret:
            text = text.replace(secret, "***")
    return text


def _tls_options(tls: RedisTls | None) -> dict[str, object]:
    if tls is None:
        return {}
    return {
        "ssl": True,
        "ssl_cert_reqs": "required",
        "ssl_ca_data": tls.ca_pem,
        "ssl_certfile": tls.cert_file,
        "ssl_keyfile": tls.key_file,
        "ssl_check_hostname": tls.check_hostname,
    }


def _client(endpoint: RedisEndpoint, timeout_s: float) -> redis.Redis:
    """A plain client with no retries: callers poll with their own deadline."""
    return redis.Redis(
        host=endpoint.host,
        port=endpoint.port,
        username=endpoint.username,
        # An empty secret means "no password", not AUTH with an empty string.
        password=(endpoint.password.get_secret_value() or None) if endpoint.password else None,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        decode_responses=True,
        retry=Retry(NoBackoff(), 0),
        single_connection_client=True,
        client_name="redis-placer",
        **_tls_options(endpoint.tls),  # type: ignore[arg-type]
    )


# AuthorizationError is missing from older redis-py releases.
_AUTH_EXCEPTIONS: tuple[type[Exception], ...] = tuple(
    getattr(redis.exceptions, name)
    for name in ("AuthenticationError", "AuthorizationError")
    if hasattr(redis.exceptions, name)
)


@contextmanager
def _mapped_errors(endpoint: RedisEndpoint, doing: str, timeout_s: float) -> Iterator[None]:
    """Turn redis-py exceptions into our one-line kinds.

    Auth errors are raised ``from None``: their chained text is not needed and is one
    less place a credential could leak.
    """
    try:
        yield
    except _AUTH_EXCEPTIONS as exc:
        raise RedisAuthError(
            endpoint, f"authentication failed while {doing}: {_auth_reason(exc)}"
        ) from None
    except redis.exceptions.AuthenticationWrongNumberOfArgsError:
        raise RedisAuthError(
            endpoint, f"authentication failed while {doing}: server expects a username"
        ) from None
    except redis.ResponseError as exc:
        text = _scrub(str(exc), endpoint)
        code = getattr(exc, "status_code", None) or text.split(" ", 1)[0]
        if code in _AUTH_REASONS or text.startswith(tuple(_AUTH_REASONS)):
            raise RedisAuthError(
                endpoint, f"authentication failed while {doing}: {_auth_reason(exc)}"
            ) from None
        raise RedisCommandError(endpoint, f"error while {doing}: {text}") from exc
    except redis.TimeoutError as exc:
        hint = " (does it serve TLS on this port? policy redis.tls)" if endpoint.tls else ""
        raise RedisUnreachable(
            endpoint, f"unreachable: no answer within {timeout_s:g}s while {doing}{hint}"
        ) from exc
    except (redis.ConnectionError, OSError) as exc:
        text = _scrub(_first_line(exc), endpoint)
        tls_problem = _tls_problem(text, endpoint.tls)
        if tls_problem:
            raise RedisTlsError(endpoint, f"{tls_problem} while {doing}") from None
        hint = ""
        if endpoint.tls is None and "reset by peer" in text:
            hint = " (a server that serves TLS only resets plain connections: policy redis.tls)"
        raise RedisUnreachable(endpoint, f"unreachable while {doing}: {text}{hint}") from exc
    except redis.RedisError as exc:
        raise RedisCommandError(
            endpoint, f"error while {doing}: {_scrub(_first_line(exc), endpoint)}"
        ) from exc


def _tls_problem(text: str, tls: RedisTls | None) -> str:
    """One line for a failed TLS handshake, or "" when ``text`` is not one."""
    if "CERTIFICATE_VERIFY_FAILED" in text:
        reason = text.split("certificate verify failed:", 1)[-1].split("(_ssl", 1)[0].strip(" .")
        ca = f"the CA of {tls.source}" if tls is not None and tls.source else "the CA given"
        return f"TLS: the server's certificate does not verify against {ca}: {reason}"
    client_cert = ("CERTIFICATE_REQUIRED", "ALERT_BAD_CERTIFICATE", "violation of protocol")
    if tls is not None and any(mark in text for mark in client_cert):
        return (
            "TLS: the server asks for a client certificate (tls-auth-clients) and refused the "
            "one shown, or none was shown"
        )
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text:
        return "TLS: the server does not speak TLS on this port (policy redis.tls)"
    if "[SSL" in text:
        return f"TLS handshake failed: {text.split('[SSL', 1)[1].split(']', 1)[-1].strip()}"
    return ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


_AUTH_REASONS = {
    "WRONGPASS": "wrong username or password (WRONGPASS)",
    "NOAUTH": "a password is required (NOAUTH)",
    "NOPERM": "the user lacks permission (NOPERM)",
}


def _auth_reason(exc: BaseException) -> str:
    """A short, fixed cause: server text is not echoed (it holds no secret, but we
    do not rely on that)."""
    code = str(getattr(exc, "status_code", "") or "")
    text = str(exc)
    for known, reason in _AUTH_REASONS.items():
        if code == known or text.startswith(known):
            return reason
    lowered = text.lower()
    if "without any password configured" in lowered or "no password is set" in lowered:
        return "a password was sent but the server has none configured"
    if "invalid" in lowered or "wrong" in lowered:
        return _AUTH_REASONS["WRONGPASS"]
    return type(exc).__name__


def _command(endpoint: RedisEndpoint, timeout_s: float, *args: str) -> str:
    """Run one admin command and return its raw text reply.

    ``execute_command("CLUSTER", "NODES")`` (two arguments) has no redis-py response
    callback, so we get the server's text and parse it exactly ourselves.
    """
    doing = " ".join(args)
    with _mapped_errors(endpoint, doing, timeout_s), _client(endpoint, timeout_s) as client:
        reply = client.execute_command(*args)
    if isinstance(reply, bytes):
        return reply.decode()
    return str(reply)


# -- parsing ----------------------------------------------------------------------------


def _parse_slots(
    tokens: list[str], line: str, source: RedisEndpoint | str
) -> list[tuple[int, int]]:
    slots: list[tuple[int, int]] = []
    for tok in tokens:
        if tok.startswith("["):
            continue  # "[slot->-id]" migrating / "[slot-<-id]" importing: not owned yet
        lo_s, sep, hi_s = tok.partition("-")
        try:
            lo = int(lo_s)
            hi = int(hi_s) if sep else lo
        except ValueError:
            raise ClusterNodesParseError(source, f"bad slot {tok!r} in line {line!r}") from None
        if not 0 <= lo <= hi <= 16383:
            raise ClusterNodesParseError(source, f"slot range {tok!r} out of 0-16383")
        slots.append((lo, hi))
    return slots


def _parse_address(
    field: str, line: str, source: RedisEndpoint | str
) -> tuple[str, int, int | None, str | None]:
    """``ip:port@cport[,hostname]`` (Redis >= 4; 7 adds the hostname); IPv6 safe."""
    addr, _, hostname = field.partition(",")
    hostport, _, bus = addr.partition("@")
    ip, sep, port_s = hostport.rpartition(":")
    try:
        if not sep:
            raise ValueError(field)
        port = int(port_s)
        bus_port = int(bus) if bus else None
    except ValueError:
        raise ClusterNodesParseError(source, f"bad address {field!r} in line {line!r}") from None
    return ip, port, bus_port, hostname or None


def parse_cluster_nodes(text: str, source: RedisEndpoint | str = "?") -> list[ClusterNodeInfo]:
    """Parse the raw ``CLUSTER NODES`` reply.

    Format per line: ``<id> <ip:port@cport[,hostname]> <flags> <master|-> <ping-sent>
    <pong-recv> <config-epoch> <link-state> <slot> ...``.
    """
    nodes: list[ClusterNodeInfo] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) < 8:
            raise ClusterNodesParseError(source, f"expected at least 8 fields in {line!r}")
        node_id, addr, flags_s, master, _ping, _pong, epoch_s, link = parts[:8]
        ip, port, bus_port, hostname = _parse_address(addr, line, source)
        flags = tuple(f for f in flags_s.split(",") if f and f != "noflags")
        role: Role = "master" if "master" in flags else "replica" if "slave" in flags else "unknown"
        try:
            epoch = int(epoch_s)
        except ValueError:
            raise ClusterNodesParseError(source, f"bad config epoch in {line!r}") from None
        nodes.append(
            ClusterNodeInfo(
                node_id=node_id,
                ip=ip,
                port=port,
                bus_port=bus_port,
                hostname=hostname,
                flags=flags,
                role=role,
                master_id=None if master == "-" else master,
                myself="myself" in flags,
                connected=link == "connected",
                failed="fail" in flags,
                suspected="fail?" in flags,
                handshake="handshake" in flags,
                config_epoch=epoch,
                slots=tuple(_parse_slots(parts[8:], line, source)),
            )
        )
    return nodes


def _parse_info_text(text: str) -> dict[str, str]:
    """``key:value`` lines (CLUSTER INFO, INFO): comments and blanks skipped, values raw."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value
    return out


# -- public calls -----------------------------------------------------------------------


def read_cluster_nodes(
    endpoint: RedisEndpoint, timeout: float = DEFAULT_IO_TIMEOUT_S
) -> list[ClusterNodeInfo]:
    """The cluster as ``endpoint`` sees it (its own line has ``myself=True``)."""
    return parse_cluster_nodes(_command(endpoint, timeout, "CLUSTER", "NODES"), endpoint)


def cluster_info(endpoint: RedisEndpoint, timeout: float = DEFAULT_IO_TIMEOUT_S) -> dict[str, str]:
    """``CLUSTER INFO`` as raw strings, e.g. ``{"cluster_state": "ok", ...}``."""
    return _parse_info_text(_command(endpoint, timeout, "CLUSTER", "INFO"))


def info_replication(
    endpoint: RedisEndpoint, timeout: float = DEFAULT_IO_TIMEOUT_S
) -> dict[str, str]:
    """``INFO replication`` as raw strings (``role``, ``master_link_status``, ...)."""
    with (
        _mapped_errors(endpoint, "INFO replication", timeout),
        _client(endpoint, timeout) as client,
    ):
        # Bypass redis-py's INFO parser (it converts types and nests slaveN entries).
        client.set_response_callback("INFO", lambda r, **_: r)
        reply = client.execute_command("INFO", "replication")
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return _parse_info_text(text)


def config_get(
    endpoint: RedisEndpoint, name: str, timeout: float = DEFAULT_IO_TIMEOUT_S
) -> str | None:
    """One setting by ``CONFIG GET``; None when the server has no such setting."""
    with _mapped_errors(endpoint, f"CONFIG GET {name}", timeout), _client(endpoint, timeout) as c:
        c.set_response_callback("CONFIG GET", lambda r, **_: r)
        reply = c.execute_command("CONFIG", "GET", name)
    pairs = (
        list(reply.items())
        if isinstance(reply, dict)
        else list(zip(reply[::2], reply[1::2], strict=False))
    )
    for key, value in pairs:
        text = key.decode() if isinstance(key, bytes) else str(key)
        if text == name:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def _myself(nodes: list[ClusterNodeInfo], endpoint: RedisEndpoint) -> ClusterNodeInfo:
    for node in nodes:
        if node.myself:
            return node
    raise ClusterNodesParseError(endpoint, "CLUSTER NODES has no 'myself' line")


def _state_line(me: ClusterNodeInfo, nodes: list[ClusterNodeInfo], old_id: str) -> str:
    old = next((n for n in nodes if n.node_id == old_id), None)
    old_desc = f"{old.role} of {old.master_id or '-'}" if old else "missing"
    return f"target is {me.role}, old master {old_id[:8]} is {old_desc}"


def failover_to(
    replica_endpoint: RedisEndpoint,
    timeout_s: float = 30.0,
    poll_s: float = 0.1,
    *,
    expected_master_id: str | None = None,
    old_master_endpoint: RedisEndpoint | None = None,
    io_timeout_s: float = DEFAULT_IO_TIMEOUT_S,
) -> FailoverResult:
    """Promote ``replica_endpoint`` with a plain ``CLUSTER FAILOVER`` and wait until it settles.

    Plain (not FORCE/TAKEOVER) because it is the only kind that loses no write: the
    master pauses clients until the replica has caught up. Settled means: the
    target sees itself as master and the old master as its replica, and the old
    master reports ``master_link_status:up``. Idempotent: a target that is already
    master returns ``performed=False`` and nothing is sent.

    The old master is reached at the address the cluster announces for it unless
    ``old_master_endpoint`` is given; it uses the target's credentials. Other nodes
    learn the new roles by gossip within about a node-timeout. Redis's election timers
    (``placer.redis.elections``) then hold back another failover through the same nodes: the
    target may not stand again for 4 x node-timeout, the old master gets no votes for 2 x.
    """
    started = time.monotonic()
    nodes = read_cluster_nodes(replica_endpoint, io_timeout_s)
    me = _myself(nodes, replica_endpoint)
    if me.role == "master":
        mine = [n.node_id for n in nodes if n.master_id == me.node_id]
        previous = expected_master_id if expected_master_id in mine else next(iter(mine), None)
        return FailoverResult(
            performed=False,
            new_master_id=me.node_id,
            old_master_id=previous,
            seconds=time.monotonic() - started,
        )
    if me.role != "replica" or not me.master_id:
        raise NotAReplica(replica_endpoint, f"is not a replica (flags {','.join(me.flags)})")
    if expected_master_id and me.master_id != expected_master_id:
        raise NotAReplica(
            replica_endpoint,
            f"is a replica of {me.master_id}, not of the expected master {expected_master_id}",
        )
    old_id = me.master_id
    old_node = next((n for n in nodes if n.node_id == old_id), None)
    # Refuse early what Redis would accept and then abandon after pausing the
    # master's writes for 5 s: a failing master, or a replica that cannot catch up.
    if old_node is not None and (old_node.failed or old_node.suspected):
        raise FailoverRefused(
            replica_endpoint,
            f"its master {old_node.address} is flagged failing; a plain failover needs a live master",
        )
    link = info_replication(replica_endpoint, io_timeout_s).get("master_link_status")
    if link != "up":
        raise FailoverRefused(
            replica_endpoint,
            f"its replication link to the master is {link or 'unknown'}; it could not catch up",
        )
    if old_master_endpoint is None:
        if old_node is None or not old_node.ip:
            raise NotAReplica(replica_endpoint, f"its master {old_id} has no known address")
        old_master_endpoint = replica_endpoint.at(old_node.ip, old_node.port)

    try:
        reply = _command(replica_endpoint, io_timeout_s, "CLUSTER", "FAILOVER")
    except RedisCommandError as exc:
        raise FailoverRefused(replica_endpoint, f"refused CLUSTER FAILOVER: {exc.detail}") from exc
    if reply.upper() != "OK":
        raise FailoverRefused(replica_endpoint, f"unexpected reply to CLUSTER FAILOVER: {reply!r}")

    deadline = started + timeout_s
    state = "failover requested"
    while True:
        try:
            state = _settled_problem(replica_endpoint, old_id, old_master_endpoint, io_timeout_s)
        except RedisUnreachable as exc:
            state = str(exc)  # transient while roles switch: keep polling
        if state == "":
            return FailoverResult(
                performed=True,
                new_master_id=me.node_id,
                old_master_id=old_id,
                seconds=time.monotonic() - started,
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FailoverTimeout(
                replica_endpoint,
                f"failover did not complete within {timeout_s:g}s; last seen: {state}",
            )
        time.sleep(min(poll_s, remaining))


def _settled_problem(
    target: RedisEndpoint, old_id: str, old_master: RedisEndpoint, io_timeout_s: float
) -> str:
    """ "" when the failover has fully settled, else what is still missing."""
    nodes = read_cluster_nodes(target, io_timeout_s)
    me = _myself(nodes, target)
    old = next((n for n in nodes if n.node_id == old_id), None)
    if me.role != "master" or old is None or old.role != "replica" or old.master_id != me.node_id:
        return _state_line(me, nodes, old_id)
    repl = info_replication(old_master, io_timeout_s)
    if repl.get("role") != "slave" or repl.get("master_link_status") != "up":
        return (
            f"old master {old_master.address} role={repl.get('role')} "
            f"master_link_status={repl.get('master_link_status')}"
        )
    return ""


def password_from_env_or_file(env_var: str | None, file_path: str | None) -> str | None:
    """The Redis password: the env var if set and non-empty, else the file's content.

    A file (a mounted Kubernetes Secret) is read without its trailing newline, which
    editors and ``kubectl create secret --from-file`` often leave. None when neither
    source is configured; an unreadable configured file is an error, not "no password".
    """
    if env_var:
        value = os.environ.get(env_var)
        if value:
            return value
    if file_path:
        try:
            content = Path(file_path).read_text(encoding="utf-8")
        except OSError as exc:
            raise PasswordSourceError(
                f"password file {file_path}: cannot read ({exc.strerror or type(exc).__name__})"
            ) from None
        content = content.rstrip("\r\n")
        return content or None
    return None
