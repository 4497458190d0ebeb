"""Where a snapshot or a policy comes from when it is a file or stdin.

A dump is the text ``kubectl get -o yaml|json`` prints: UTF-8. Anything else (a gzipped dump,
a binary, a file in another encoding) is named for what it is in one line, never decoded into
nonsense or a traceback.
"""

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from models.errors import InputError
from models.identity.profiles import with_profile
from models.kube_objects import build_snapshot, parse_documents
from models.policy import Policy
from models.snapshot import Snapshot
from placer.inputs.content import require_content

_COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"PK\x03\x04": "zip",
}
_DECOMPRESS = {"gzip": "gunzip -c", "bzip2": "bunzip2 -c", "xz": "xz -dc", "zstd": "zstd -dc"}
_WIDE = {b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}


def read_bytes(path: str, what: str = "") -> bytes:
    """The raw content of ``path`` (``-`` is stdin)."""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read{what}: {exc.strerror}", obj=path) from None


def decode_text(data: bytes, source: str) -> str:
    """UTF-8 text, or an error saying what the bytes are instead."""
    for magic, name in _COMPRESSED.items():
        if data.startswith(magic):
            how = _DECOMPRESS.get(name)
            hint = f" first, e.g. `{how} FILE | redis-placer ... -f -`" if how else " first"
            raise InputError(f"is {name}-compressed, not text: decompress it{hint}", obj=source)
    for bom, name in _WIDE.items():
        if data.startswith(bom):
            raise InputError(
                f"is {name} text: convert it to UTF-8 first, e.g. `iconv -f {name} -t UTF-8`",
                obj=source,
            )
    nul = data.find(b"\x00", 0, 65536)
    if nul >= 0:
        raise InputError(
            f"holds binary data (a NUL byte at offset {nul}), not a YAML or JSON text",
            obj=source,
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}, line {line}): "
            "save it as UTF-8, e.g. `iconv -f LATIN1 -t UTF-8`",
            obj=source,
        ) from None


def read_text(path: str, what: str = "") -> str:
    source = "stdin" if path == "-" else path
    return decode_text(read_bytes(path, what), source)


class _UniqueKeys(yaml.SafeLoader):
    """YAML whose mappings name each key once: in a policy, a key written twice would let the
    later one win without a word (``survive: zone`` undone by a second ``rules:``)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    problem=f"key {key!r} appears twice (again on line {line})"
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_policy(path: str | None) -> Policy:
    if path is None:
        return Policy()
    where = f"policy {path}"
    text = decode_text(read_bytes(path, " policy"), where)
    try:
        data = yaml.load(text, Loader=_UniqueKeys)
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML: {str(exc).splitlines()[0]}", obj=where) from None
    except RecursionError:
        raise InputError("nested too deeply to be a policy", obj=where) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("must be a mapping of policy keys", obj=where)
    return validate_policy(data, where)


def validate_policy(data: Mapping[str, Any], where: str) -> Policy:
    """The policy, or the first thing wrong with it as one line naming the key."""
    try:
        with_profile(data)
    except ValueError as exc:
        raise InputError(str(exc), obj=where, field="identity.profile") from None
    try:
        return Policy.model_validate(data)
    except RecursionError:
        raise InputError("nested too deeply to be a policy", obj=where) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "policy"
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InputError(f"{message}{more}", obj=where, field=field) from None


def snapshot_from_file(
    path: str,
    policy: Policy,
    *,
    allow_empty: bool = False,
    need_pods: bool = True,
    namespace: str | None = None,
) -> Snapshot:
    """The snapshot in a dump; unless ``allow_empty``, one that holds nothing to judge is an error
    (no nodes, or with ``need_pods`` no selected pod). With ``namespace``, the Redis pods are
    those of that namespace (models.kube_objects.build_snapshot)."""
    source = "stdin" if path == "-" else path
    objects = parse_documents(read_text(path), source)
    snapshot = build_snapshot(objects, policy, namespace=namespace)
    if not allow_empty:
        require_content(objects, snapshot, policy, source, need_pods=need_pods, namespace=namespace)
    return snapshot
