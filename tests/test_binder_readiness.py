"""The binder's /readyz follows the API server's own: with etcd away, requests wait rather than
fail, so the binder's view alone would still look current."""

import threading

from placer.binder.command import SERVER_CONDITION, follow_server_readiness
from placer.kube.fake import FakeKubeAdapter
from placer.metrics import Readiness


def _probe_once(adapter: FakeKubeAdapter, readiness: Readiness) -> None:
    stop = threading.Event()
    stop.set()  # one probe, then return
    follow_server_readiness(adapter, readiness, stop, ("redis-placer", "redis-placer-binder"))


def test_not_ready_while_the_api_server_is_not_and_ready_again_after() -> None:
    adapter = FakeKubeAdapter()
    readiness = Readiness("cluster", SERVER_CONDITION)
    readiness.set("cluster", True)
    adapter.server_up = False
    _probe_once(adapter, readiness)
    assert readiness.missing() == [SERVER_CONDITION]
    adapter.server_up = True
    _probe_once(adapter, readiness)
    assert readiness.ready
