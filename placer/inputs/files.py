"""Where a snapshot comes from: a file, stdin, or (with the binder issue's adapter) a live cluster."""

import sys
from pathlib import Path

import yaml

from models.errors import InputError
from models.kube_objects import build_snapshot, parse_documents
from models.policy import Policy
from models.snapshot import Snapshot


def read_policy(path: str | None) -> Policy:
    if path is None:
        return Policy()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(f"cannot read policy: {exc.strerror}", obj=path) from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise InputError(
            f"not valid YAML: {str(exc).splitlines()[0]}", obj=f"policy {path}"
        ) from None
    if not isinstance(data, dict):
        raise InputError("must be a mapping of policy keys", obj=f"policy {path}")
    from pydantic import ValidationError

    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "policy"
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InputError(f"{message}{more}", obj=f"policy {path}", field=where) from None


def read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", obj=path) from None


def snapshot_from_file(path: str, policy: Policy) -> Snapshot:
    source = "stdin" if path == "-" else path
    return build_snapshot(parse_documents(read_text(path), source), policy)
