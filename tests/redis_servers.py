"""Real ``redis-server`` processes for tests: their configuration, start, and clients.

Shared by the 6-node loopback harness (tests/redis_harness.py) and the e2e pods that a real
control plane schedules (tests/e2e/redis_pods.py), so both run Redis the same way: each server
on its own 127.x address with ``bind-source-addr`` (or the cluster bus sees every peer as
127.0.0.1), optionally with a password and TLS as a deployment's chart would set them.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.tls_material import LeafFiles

APT_HINT = "install the Debian package 'redis-server' (it pulls in redis-tools for redis-cli)"


@dataclass(frozen=True)
class RedisSecurity:
    """What every server of one Redis cluster requires of its clients and peers."""

    password: str | None = None
    tls: LeafFiles | None = None
    """Servers serve TLS only (``port 0``, ``tls-port``), peers and replicas too."""
    auth_clients: bool = True
    """``tls-auth-clients yes``: a client must show a certificate the CA signed."""


def redis_binaries_missing() -> str | None:
    """Why Redis tests cannot run here, or None when both binaries are on PATH."""
    missing = [b for b in ("redis-server", "redis-cli") if shutil.which(b) is None]
    if missing:
        return f"{' and '.join(missing)} not found on PATH; {APT_HINT}"
    return None


def server_config(
    ip: str,
    port: int,
    node_dir: Path,
    *,
    node_timeout_ms: int,
    security: RedisSecurity,
    persistent: bool = False,
) -> str:
    """``persistent``: an append-only file in ``node_dir``, as the charts keep one on the pod's
    volume, so a server started again has its data (without it, a master that returns before
    its replica is promoted comes back empty, and its replica syncs the emptiness)."""
    lines = [
        f"bind {ip}",
        f"bind-source-addr {ip}",
        # As the deployments set it (the pod IP): a server started again on a new IP tells its
        # peers so, and sees itself there too.
        f"cluster-announce-ip {ip}",
        "protected-mode no",
        "daemonize no",
        f"dir {node_dir}",
        f"logfile {node_dir / 'redis.log'}",
        'save ""',
        f"appendonly {'yes' if persistent else 'no'}",
        "cluster-enabled yes",
        "cluster-config-file nodes.conf",
        f"cluster-node-timeout {node_timeout_ms}",
        "cluster-allow-replica-migration no",
        "repl-diskless-sync-delay 0",
        "enable-debug-command yes",
    ]
    tls = security.tls
    if tls is None:
        lines.append(f"port {port}")
    else:
        lines += [
            "port 0",
            f"tls-port {port}",
            f"tls-cert-file {tls.cert}",
            f"tls-key-file {tls.key}",
            f"tls-ca-cert-file {tls.ca_cert}",
            "tls-cluster yes",
            "tls-replication yes",
            f"tls-auth-clients {'yes' if security.auth_clients else 'no'}",
        ]
    if security.password:
        lines += [f"requirepass {security.password}", f"masterauth {security.password}"]
    return "\n".join(lines) + "\n"


def _die_with_parent() -> None:
    """Runs in the child: let the kernel SIGKILL redis-server if pytest dies abruptly."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def spawn_server(config: str, node_dir: Path) -> subprocess.Popen[bytes]:
    """Start redis-server on ``config``, written to a 0600 file (never argv: `ps` shows argv)."""
    server = shutil.which("redis-server")
    if server is None:
        raise RuntimeError(f"redis-server not found on PATH; {APT_HINT}")
    node_dir.mkdir(parents=True, exist_ok=True)
    conf = node_dir / "redis.conf"
    conf.write_text(config)
    conf.chmod(0o600)
    return subprocess.Popen(
        [server, str(conf)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_die_with_parent,
    )


def cli_command(security: RedisSecurity, *args: str) -> tuple[list[str], dict[str, str]]:
    """``redis-cli`` with the cluster's TLS options, and an environment holding its password
    (REDISCLI_AUTH, not argv)."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise RuntimeError(f"redis-cli not found on PATH; {APT_HINT}")
    cmd = [cli]
    if security.tls is not None:
        tls = security.tls
        cmd += ["--tls", "--cacert", str(tls.ca_cert), "--cert", str(tls.cert)]
        cmd += ["--key", str(tls.key)]
    env = dict(os.environ)
    if security.password:
        env["REDISCLI_AUTH"] = security.password
    return [*cmd, *args], env


def client(ip: str, port: int, security: RedisSecurity, timeout_s: float = 2.0) -> redis.Redis:
    """A plain redis-py client to one server (no retries: fail fast, poll instead)."""
    tls = security.tls
    extra: dict[str, object] = {}
    if tls is not None:
        extra = {
            "ssl": True,
            "ssl_ca_certs": str(tls.ca_cert),
            "ssl_certfile": str(tls.cert),
            "ssl_keyfile": str(tls.key),
            "ssl_check_hostname": False,
        }
    return redis.Redis(
        host=ip,
        port=port,
        password=security.password,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        decode_responses=True,
        retry=Retry(NoBackoff(), 0),
        **extra,  # type: ignore[arg-type]
    )
