"""The guard inside the binder's process (``binder --guard``): its webhook server on every
replica, its acting loop on the leader."""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.policy import Policy
from placer.kube.source import ObjectSource
from placer.maintenance.guard import DEFAULT_MAX_HOLD_S, Guard
from placer.maintenance.webhook import WebhookServer

log = logging.getLogger(__name__)

RENEW_EVERY_S = 6 * 3600.0


@dataclass(frozen=True)
class GuardSettings:
    webhook_port: int = 9443
    namespace: str = "redis-placer"
    service: str = "redis-placer-webhook"
    webhook: str = "redis-placer-guard"
    secret: str = "redis-placer-webhook-tls"
    max_hold_s: float = DEFAULT_MAX_HOLD_S
    redis_port: int | None = None


@dataclass(frozen=True)
class RunningGuard:
    guard: Guard
    port: int
    """The webhook's port (the one asked for, or the one given for 0)."""


@contextmanager
def running_guard(
    adapter: Any,
    policy: Policy,
    metrics: Any,
    settings: GuardSettings,
    stop: threading.Event,
    leading: Callable[[], bool],
    objects: ObjectSource | None = None,
) -> Iterator[RunningGuard]:
    """Serving material from the guard's Secret (made on first start), the webhook, the loop;
    the guard reads nodes, pods and StatefulSets from ``objects`` (the binder's watch cache)."""
    from placer.maintenance.certs import ensure_serving_material

    directory = Path(tempfile.mkdtemp(prefix="redis-placer-guard-"))

    def serving() -> Any:
        return ensure_serving_material(
            adapter,
            namespace=settings.namespace,
            secret_name=settings.secret,
            service_name=settings.service,
            webhook_name=settings.webhook,
            directory=directory,
        )

    material = serving()
    guard = Guard(
        adapter,
        policy,
        port=settings.redis_port or policy.redis.port,
        metrics=metrics,
        max_hold_s=settings.max_hold_s,
        objects=objects,
    )
    loop = threading.Thread(target=guard.run, args=(stop, leading), name="guard", daemon=True)
    with WebhookServer(
        guard.admit,
        cert_file=str(material.cert_file),
        key_file=str(material.key_file),
        port=settings.webhook_port,
    ) as server:

        def renew() -> None:
            """Within 30 days of its end the certificate is renewed (by whichever replica
            comes first) and served from the next connection on."""
            while not stop.wait(RENEW_EVERY_S):
                try:
                    fresh = serving()
                    server.reload(str(fresh.cert_file), str(fresh.key_file))
                except Exception as exc:  # the current certificate serves on
                    log.warning("guard: serving certificate not renewed: %s", exc)

        log.info("guard: webhook on :%d, holds at most %gs", server.port, settings.max_hold_s)
        loop.start()
        threading.Thread(target=renew, name="guard-certificate", daemon=True).start()
        try:
            yield RunningGuard(guard, server.port)
        finally:
            guard.wake.set()
            loop.join(timeout=5)
