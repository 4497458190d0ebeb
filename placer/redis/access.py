"""The password and TLS material each Redis cluster is reached with, and the endpoint of a pod.

In the cluster they come from the Secrets the deployment already has, found the way its own
pods find them (placer.redis.credentials) or named in the policy (``redis.auth``,
``redis.tls``); a password given to the command (``--password-env``, ``--password-file`` or their
policy keys) comes first. Anything named that cannot be read (a missing Secret or key, a Secret
the ServiceAccount may not read, an unreadable file) is an ``AccessError``: one line, before any
Redis is asked anything, so nothing changes.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from models.cluster import Member
from models.policy import Policy, SecretKey, TlsSecret
from models.snapshot import Snapshot
from placer.redis.credentials import Literal, SecretRef, TlsRefs, pod_credentials
from placer.redis.ops import RedisEndpoint, RedisTls

__all__ = ["AccessError", "ClusterAccess", "Dialer", "resolve_access"]

SecretReader = Callable[[str, str], Mapping[str, bytes] | None]
"""(namespace, name) -> the Secret's decoded data, None when it does not exist; raises on any
other failure (the adapter's ``KubeApiError``)."""
PodReader = Callable[[str, str], Mapping[str, Any] | None]


class AccessError(Exception):
    """Credentials that were named but cannot be had: one line, exit 2, nothing changed."""


@dataclass(frozen=True)
class ClusterAccess:
    """How one Redis cluster's pods are reached."""

    password: SecretStr | None = None
    username: str | None = None
    tls: RedisTls | None = None
    source: str = ""
    """Where the password came from (never the password), for messages."""


@dataclass
class Dialer:
    """Each member's endpoint: its pod IP, the Redis port, and its cluster's access."""

    port: int
    access: dict[str, ClusterAccess] = field(default_factory=dict)
    default: ClusterAccess = field(default_factory=ClusterAccess)
    issues: list[tuple[str, str]] = field(default_factory=list)
    """(object, message) of what could not be read, its cluster dialled without it: a pod in
    a namespace this ServiceAccount may not read stops that cluster's credentials only."""

    def of(self, cluster: str) -> ClusterAccess:
        return self.access.get(cluster, self.default)

    def __call__(self, member: Member) -> RedisEndpoint | None:
        if not member.pod.pod_ip:
            return None
        access = self.of(member.cluster)
        return RedisEndpoint(
            host=member.pod.pod_ip,
            port=self.port,
            password=access.password,
            username=access.username,
            tls=access.tls,
        )


class _Files:
    """A private folder for client certificates and keys (redis-py takes them as files only),
    removed when the process ends.

    A file is replaced whole (a new file renamed over it) and only when its content changes:
    the guard resolves access at every reading while its other threads open TLS connections
    with the same files, and a file rewritten in place can be read half written (the handshake
    then fails, and a member that serves is taken for one that does not)."""

    def __init__(self) -> None:
        self._folder: Path | None = None
        self._lock = threading.Lock()

    def write(self, name: str, data: bytes) -> str:
        with self._lock:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="redis-placer-tls-"))
                atexit.register(shutil.rmtree, self._folder, True)
            path = self._folder / name
            try:
                if path.read_bytes() == data:
                    return str(path)
            except OSError:
                pass  # not written yet
            fd, temporary = tempfile.mkstemp(dir=self._folder, prefix=f".{name}.")
            try:
                with os.fdopen(fd, "wb") as out:  # mkstemp makes it 0600
                    out.write(data)
                os.replace(temporary, path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
            return str(path)


_FILES = _Files()


def _named(template: str, cluster: str) -> str:
    return template.replace("{cluster}", cluster.split("/", 1)[-1])


class _Secrets:
    """Secret reads for one run, each Secret once, every failure one clear line."""

    def __init__(self, read: SecretReader | None) -> None:
        self.read = read
        self.cache: dict[tuple[str, str], Mapping[str, bytes] | None] = {}

    def value(self, namespace: str, name: str, key: str, why: str, optional: bool = False) -> bytes:
        if self.read is None:
            raise AccessError(f"secret {namespace}/{name} ({why}): no cluster to read it from")
        where = (namespace, name)
        if where not in self.cache:
            try:
                self.cache[where] = self.read(namespace, name)
            except Exception as exc:
                raise AccessError(
                    f"secret {namespace}/{name} ({why}): cannot read it: {exc}; the rebalance "
                    f"ServiceAccount needs get on that Secret in namespace {namespace}"
                ) from None
        data = self.cache[where]
        if data is None:
            raise AccessError(f"secret {namespace}/{name} ({why}): not found")
        if key not in data:
            if optional:
                return b""
            keys = ", ".join(sorted(data)) or "none"
            raise AccessError(
                f"secret {namespace}/{name} ({why}) has no key {key!r} (keys: {keys})"
            )
        return data[key]


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode().rstrip("\r\n")
    except UnicodeDecodeError:
        raise AccessError(f"{what} is not UTF-8 text") from None


def _file(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise AccessError(f"{what} {path}: cannot read ({exc.strerror or exc})") from None


def _tls(
    namespace: str,
    cluster: str,
    policy: Policy,
    refs: TlsRefs | None,
    via_pod: str,
    secrets: _Secrets,
) -> RedisTls | None:
    setting = policy.redis.tls
    if setting.mode == "off":
        return None
    explicit: TlsSecret | None = setting.secret
    ca: bytes | None
    cert: bytes | None
    key: bytes | None
    if explicit is not None:
        name = _named(explicit.name, cluster)
        why = "policy redis.tls.secret"
        ca = secrets.value(namespace, name, explicit.ca, why)
        cert = secrets.value(namespace, name, explicit.cert, why) if explicit.cert else None
        key = secrets.value(namespace, name, explicit.key, why) if explicit.key else None
        source = f"secret {namespace}/{name}"
    elif setting.ca_file or setting.cert_file:
        ca = _file(setting.ca_file, "policy redis.tls.caFile") if setting.ca_file else None
        cert = _file(setting.cert_file, "policy redis.tls.certFile") if setting.cert_file else None
        key = _file(setting.key_file, "policy redis.tls.keyFile") if setting.key_file else None
        source = setting.ca_file or "the system's CAs"
    elif refs is not None:

        def read(ref: SecretRef | None) -> bytes | None:
            if ref is None:
                return None
            why = f"{ref.via} of pod {via_pod}"
            return secrets.value(namespace, ref.secret, ref.key, why, ref.optional) or None

        ca, cert, key = read(refs.ca), read(refs.cert), read(refs.key)
        named = refs.ca or refs.cert
        source = f"secret {namespace}/{named.secret}" if named else via_pod
    elif setting.mode == "on":
        raise AccessError(
            f"redis cluster {cluster}: policy redis.tls.mode is on, but neither redis.tls.secret, "
            f"redis.tls.caFile nor the pods' spec ({via_pod or 'no pod read'}) names a CA"
        )
    else:
        return None
    if (cert is None) != (key is None):
        raise AccessError(f"{source}: a client certificate needs both its certificate and key")
    stem = f"{namespace}.{cluster.split('/', 1)[-1]}"
    return RedisTls(
        ca_pem=_text(ca, f"the CA of {source}") if ca else None,
        cert_file=_FILES.write(f"{stem}.crt", cert) if cert else None,
        key_file=_FILES.write(f"{stem}.key", key) if key else None,
        source=source,
    )


def _password(
    namespace: str,
    cluster: str,
    policy: Policy,
    found: SecretRef | Literal | None,
    via_pod: str,
    secrets: _Secrets,
) -> tuple[SecretStr | None, str]:
    explicit: SecretKey | None = policy.redis.auth.secret
    if explicit is not None:
        name = _named(explicit.name, cluster)
        raw = secrets.value(namespace, name, explicit.key, "policy redis.auth.secret")
        return SecretStr(_text(raw, f"secret {namespace}/{name}")), f"secret {namespace}/{name}"
    if isinstance(found, Literal):
        return SecretStr(found.value), f"{found.via} of pod {via_pod}"
    if isinstance(found, SecretRef):
        why = f"{found.via} of pod {via_pod}"
        raw = secrets.value(namespace, found.secret, found.key, why, found.optional)
        if raw:
            text = _text(raw, f"secret {namespace}/{found.secret}")
            return SecretStr(text), f"secret {namespace}/{found.secret} key {found.key} ({why})"
    return None, ""


def _representative(members: list[Member]) -> Member:
    """A running member first: its spec is the one Redis runs with now."""
    running = [m for m in members if not m.pod.pending and not m.pod.deleting]
    return min(running or members, key=lambda m: m.key)


def resolve_access(
    snapshot: Snapshot,
    policy: Policy,
    *,
    port: int,
    password: str | None = None,
    password_source: str = "",
    read_pod: PodReader | None = None,
    read_secret: SecretReader | None = None,
) -> Dialer:
    """The dialer of every Redis cluster in ``snapshot``.

    ``password``: given to the command; it is every cluster's. ``read_pod`` and ``read_secret``
    are the live cluster's (None for a dump: only the policy's files serve then).
    """
    secrets = _Secrets(read_secret)
    given = SecretStr(password) if password else None
    by_cluster: dict[str, list[Member]] = {}
    # Skipped members too: a shard the role labels misread (every pod labelled master while
    # the cluster forms) is set right only by reading its Redis, with its password and TLS.
    for member in (*snapshot.members, *snapshot.skipped_members):
        by_cluster.setdefault(member.cluster, []).append(member)
    access: dict[str, ClusterAccess] = {}
    issues: list[tuple[str, str]] = []
    for cluster, members in sorted(by_cluster.items()):
        namespace = members[0].pod.namespace
        sample = _representative(members)
        obj = _pod(read_pod, sample, cluster, issues)
        found = pod_credentials(obj) if obj else None
        via = sample.key if obj else ""
        secret: SecretStr | None
        if given is not None:
            secret, source = given, password_source
        else:
            secret, source = _password(
                namespace, cluster, policy, found.password if found else None, via, secrets
            )
        username = policy.redis.auth.username
        if username is None and found is not None and found.username is not None:
            user = found.username
            if isinstance(user, Literal):
                username = user.value
            else:
                why = f"{user.via} of pod {via}"
                raw = secrets.value(namespace, user.secret, user.key, why, user.optional)
                username = _text(raw, f"secret {namespace}/{user.secret}") or None
        tls = _tls(namespace, cluster, policy, found.tls if found else None, via, secrets)
        access[cluster] = ClusterAccess(secret, username, tls, source)
    default = ClusterAccess(given, policy.redis.auth.username, None, password_source)
    return Dialer(port=port, access=access, default=default, issues=issues)


def _pod(
    read_pod: PodReader | None, sample: Member, cluster: str, issues: list[tuple[str, str]]
) -> Mapping[str, Any] | None:
    """The pod whose environment and volumes name its cluster's credentials, or None: no
    cluster to read it from, or it cannot be read (said in ``issues``; the other clusters go
    on: pods listed cluster-wide may lie in a namespace where this ServiceAccount may not get
    one)."""
    if read_pod is None:
        return None
    namespace, name = sample.pod.namespace, sample.pod.name
    try:
        return read_pod(namespace, name)
    except Exception as exc:
        issues.append(
            (
                f"pod {namespace}/{name}",
                f"cannot read it for Redis cluster {cluster}'s credentials: {exc}; that cluster "
                f"is dialled with the policy's credentials only (this ServiceAccount needs get "
                f"on pods in namespace {namespace}: list it among the namespaces that hold Redis)",
            )
        )
        return None
