"""``binder --guard``'s start: the serving certificate made and trusted by the webhook
configuration, the webhook answering over TLS with that authority, the loop reading."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import urllib.request
from typing import Any

from models.policy import Policy
from placer.kube.fake import FakeKubeAdapter
from placer.maintenance.serve import GuardSettings, running_guard
from placer.metrics import Metrics
from tests.kube_dicts import node, redis_pod


def _webhook_configuration() -> dict[str, Any]:
    hook = {"name": "evictions.redis-placer.io", "clientConfig": {"service": {}}}
    return {"metadata": {"name": "redis-placer-guard"}, "webhooks": [hook]}


def test_the_guard_starts_with_its_own_certificate_and_answers() -> None:
    pods = [redis_pod("solo-0", "solo", 0, "master", node="n1")]
    adapter = FakeKubeAdapter(nodes=[node("n1", "zone-a", "r1")], pods=pods)
    adapter.webhook_configurations["redis-placer-guard"] = _webhook_configuration()
    stop = threading.Event()
    settings = GuardSettings(webhook_port=0, redis_port=6379)
    with running_guard(adapter, Policy(), Metrics(), settings, stop, lambda: False) as running:
        hooks = adapter.webhook_configurations["redis-placer-guard"]["webhooks"]
        ca = base64.b64decode(hooks[0]["clientConfig"]["caBundle"]).decode()
        context = ssl.create_default_context(cadata=ca)
        context.check_hostname = False  # the certificate names the Service; the chain is checked
        request = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "namespace": "default",
                "name": "elsewhere",
                "resource": {"resource": "pods"},
                "subResource": "eviction",
                "operation": "CREATE",
            },
        }
        req = urllib.request.Request(
            f"https://127.0.0.1:{running.port}/validate",
            data=json.dumps(request).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, context=context, timeout=10) as resp:
            answer = json.loads(resp.read())
        stop.set()
    assert answer["response"] == {"uid": "u", "allowed": True}
    assert ("redis-placer", "redis-placer-webhook-tls") in adapter.secrets


def test_binder_guard_reads_from_the_binders_watch_cache() -> None:
    """``binder --guard``: the guard's objects come from the binder's cache, listed while that
    cannot serve (here: before the binder's first list)."""
    from placer.binder.command import _guarded
    from placer.binder.loop import Binder, BinderConfig
    from placer.binder.shared import CachedObjects

    adapter = FakeKubeAdapter(nodes=[node("n1", "zone-a", "r1")])
    adapter.webhook_configurations["redis-placer-guard"] = _webhook_configuration()
    binder = Binder(adapter, Policy(), BinderConfig())
    stop = threading.Event()
    stop.set()  # the guard's loop ends at once: only the wiring is looked at
    settings = {"webhook_port": 0, "redis_port": 6379}
    with _guarded(True, binder, Metrics(), stop, lambda: False, **settings) as running:
        assert running is not None
        objects = running.guard.objects
        assert isinstance(objects, CachedObjects) and objects.cache is binder.cache
        assert objects.statefulsets_every == binder.config.node_refresh_seconds
    with _guarded(False, binder, Metrics(), stop, lambda: False, **settings) as nothing:
        assert nothing is None
