"""Where a Redis pod reads its password and TLS material: followed through its own spec.

The deployments people run hand these to Redis in a few ways (docs/profiles): an environment
variable from a Secret key (the OT operator's ``REDIS_PASSWORD``, hyperspike's
``VALKEY_PASSWORD``), a ``*_FILE`` variable naming a file in a Secret volume (the bitnami chart's
``REDIS_PASSWORD_FILE``), an ACL user beside its password (valkey-io's ``VALKEY_USER`` with
``VALKEYCLI_AUTH``), and TLS files named by variables or mounted from a known volume. Following
the pod's own spec finds the Secret whatever the release is called or which ``existingSecret``
the user chose. Pure: a pod object in, references out; reading the Secrets is the caller's.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PASSWORD_SOURCES: tuple[tuple[str, str | None], ...] = (
    ("REDIS_PASSWORD", None),  # bitnami (also as REDIS_PASSWORD_FILE), OT operator
    ("REDISCLI_AUTH", None),  # OT operator, hyperspike
    ("VALKEY_PASSWORD", None),  # hyperspike
    ("VALKEYCLI_AUTH", "VALKEY_USER"),  # valkey-io: the operator's own ACL user and password
)
"""(password variable, the variable naming its ACL user), in the order they are tried."""

TLS_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("REDIS_TLS_CA_FILE", "REDIS_TLS_CERT_FILE", "REDIS_TLS_KEY_FILE"),  # bitnami
    ("REDIS_TLS_CA_CERT", "REDIS_TLS_CERT", "REDIS_TLS_CERT_KEY"),  # OT operator >= 0.24
    ("REDIS_TLS_CA_KEY", "REDIS_TLS_CERT", "REDIS_TLS_CERT_KEY"),  # OT operator < 0.24
    ("VALKEY_TLS_CA_FILE", "VALKEY_TLS_CERT_FILE", "VALKEY_TLS_KEY_FILE"),  # valkey-io
)
"""(CA, certificate, key) variables holding file paths inside a Secret volume."""

TLS_VOLUMES: tuple[str, ...] = ("redis-certificates", "tls-certs", "valkey-tls")
"""Secret volumes of server TLS material (bitnami, OT and valkey-io, hyperspike), read with the
keys of a kubernetes.io/tls Secret when no variable names the files."""

TLS_KEYS = ("ca.crt", "tls.crt", "tls.key")


@dataclass(frozen=True)
class SecretRef:
    """One key of one Secret (in the pod's namespace), and how the pod led to it."""

    secret: str
    key: str
    via: str
    """E.g. ``env REDIS_PASSWORD_FILE -> volume redis-password``: for messages."""
    optional: bool = False
    """Found through ``envFrom``: the Secret may not have the key."""


@dataclass(frozen=True)
class Literal:
    """A value written in the pod spec itself (an ACL user name)."""

    value: str
    via: str


@dataclass(frozen=True)
class TlsRefs:
    ca: SecretRef | None
    cert: SecretRef | None
    key: SecretRef | None


@dataclass(frozen=True)
class PodCredentials:
    """What the pod's spec says about reaching its Redis."""

    password: SecretRef | Literal | None = None
    username: SecretRef | Literal | None = None
    tls: TlsRefs | None = None


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]


def _env(container: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for entry in container.get("env") or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return entry
    return None


def _secret_volumes(spec: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, str]]]:
    """Volume name -> (Secret name, file path -> key) for Secret and projected Secret volumes;
    an empty map means every key is a file named by the key."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, Mapping) or not volume.get("name"):
            continue
        secret = volume.get("secret")
        if isinstance(secret, Mapping) and secret.get("secretName"):
            paths = {i["path"]: i["key"] for i in secret.get("items") or [] if _item(i)}
            out[volume["name"]] = (str(secret["secretName"]), paths)
        projected = volume.get("projected")
        for source in (
            (projected or {}).get("sources") or [] if isinstance(projected, Mapping) else []
        ):
            part = source.get("secret") if isinstance(source, Mapping) else None
            if isinstance(part, Mapping) and part.get("name"):
                paths = {i["path"]: i["key"] for i in part.get("items") or [] if _item(i)}
                out.setdefault(volume["name"], (str(part["name"]), paths))
    return out


def _item(item: object) -> bool:
    return isinstance(item, Mapping) and bool(item.get("key")) and bool(item.get("path"))


def _file_in_secret(
    spec: Mapping[str, Any], container: Mapping[str, Any], path: str, via: str
) -> SecretRef | None:
    """The Secret key behind a file path of ``container``: through the mount holding it."""
    volumes = _secret_volumes(spec)
    best: tuple[int, SecretRef] | None = None
    for mount in container.get("volumeMounts") or []:
        if not isinstance(mount, Mapping) or mount.get("name") not in volumes:
            continue
        where = posixpath.normpath(str(mount.get("mountPath") or "/"))
        secret, paths = volumes[mount["name"]]
        sub = mount.get("subPath")
        if sub:
            if posixpath.normpath(path) != where:
                continue
            relative = str(sub)
        else:
            relative = posixpath.relpath(posixpath.normpath(path), where)
            if relative.startswith(".."):
                continue
        key = paths.get(relative, relative if not paths else "")
        if not key or "/" in key:
            continue
        ref = SecretRef(secret, key, f"{via} -> volume {mount['name']}")
        if best is None or len(where) > best[0]:
            best = (len(where), ref)
    return best[1] if best else None


def _variable(spec: Mapping[str, Any], name: str, *, as_file: bool) -> SecretRef | Literal | None:
    """What variable ``name`` of the pod's containers holds: a Secret key, a file in a Secret
    volume (``as_file``, or through ``NAME_FILE``), or a literal value."""
    for container in _containers(spec):
        entry = _env(container, name)
        if entry is not None:
            ref = (entry.get("valueFrom") or {}).get("secretKeyRef") or {}
            if ref.get("name") and ref.get("key"):
                return SecretRef(str(ref["name"]), str(ref["key"]), f"env {name}")
            value = entry.get("value")
            if isinstance(value, str) and value:
                if as_file:
                    return _file_in_secret(spec, container, value, f"env {name}")
                return Literal(value, f"env {name}")
        if not as_file:
            file_entry = _env(container, f"{name}_FILE")
            value = file_entry.get("value") if file_entry else None
            if isinstance(value, str) and value:
                found = _file_in_secret(spec, container, value, f"env {name}_FILE")
                if found is not None:
                    return found
        for source in container.get("envFrom") or []:
            ref = (source or {}).get("secretRef") or {}
            prefix = str(source.get("prefix") or "")
            if ref.get("name") and name.startswith(prefix):
                key = name[len(prefix) :]
                via = f"envFrom secret {ref['name']}"
                return SecretRef(str(ref["name"]), key, via, optional=True)
    return None


def _tls_from_volume(spec: Mapping[str, Any]) -> TlsRefs | None:
    volumes = _secret_volumes(spec)
    for name in TLS_VOLUMES:
        if name in volumes:
            secret, paths = volumes[name]
            ca, cert, key = (
                SecretRef(secret, paths.get(file, file), f"volume {name}") for file in TLS_KEYS
            )
            return TlsRefs(ca=ca, cert=cert, key=key)
    return None


def pod_credentials(pod: Mapping[str, Any]) -> PodCredentials:
    """The password, ACL user and TLS material the pod's Redis is reached with."""
    spec = pod.get("spec") or {}
    password: SecretRef | Literal | None = None
    username: SecretRef | Literal | None = None
    for variable, user_variable in PASSWORD_SOURCES:
        password = _variable(spec, variable, as_file=False)
        if password is not None:
            if user_variable:
                username = _variable(spec, user_variable, as_file=False)
            break
    tls: TlsRefs | None = None
    for ca_name, cert_name, key_name in TLS_SOURCES:
        found = [_variable(spec, n, as_file=True) for n in (ca_name, cert_name, key_name)]
        refs = [f if isinstance(f, SecretRef) else None for f in found]
        if any(refs):
            ca, cert, key = refs
            if ca is None and cert is not None:
                # The OT operator names no CA file unless one is set: its certificate's Secret
                # holds it under the kubernetes.io/tls key.
                ca = SecretRef(cert.secret, "ca.crt", cert.via)
            tls = TlsRefs(ca=ca, cert=cert, key=key)
            break
    if tls is None:
        tls = _tls_from_volume(spec)
    return PodCredentials(password=password, username=username, tls=tls)


def secrets_named(credentials: PodCredentials) -> Iterator[str]:
    """Every Secret the references name, once each."""
    refs: Sequence[object] = (
        credentials.password,
        credentials.username,
        *(
            (credentials.tls.ca, credentials.tls.cert, credentials.tls.key)
            if credentials.tls
            else ()
        ),
    )
    seen: set[str] = set()
    for ref in refs:
        if isinstance(ref, SecretRef) and ref.secret not in seen:
            seen.add(ref.secret)
            yield ref.secret
