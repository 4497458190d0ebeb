"""Fixtures for tests against a real kube-apiserver (see control_plane.py).

``control_plane`` (session) starts etcd + kube-apiserver (+ kube-scheduler when present) from
``$KUBEBUILDER_ASSETS``; without them every test that uses it is skipped. ``kube_api`` is an
admin ``ApiClient``, ``kube_adapter`` the real adapter over it, ``namespace`` a fresh namespace.
"""

import secrets
from collections.abc import Iterator

import pytest
from kubernetes.client import ApiClient

from placer.kube.adapter import KubernetesAdapter
from tests.e2e.control_plane import SKIP_REASON, ControlPlane, create_namespace, find_assets


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    assets = find_assets()
    if assets is None:
        pytest.skip(SKIP_REASON)
    plane = ControlPlane(assets, tmp_path_factory.mktemp("control-plane"))
    plane.start()  # a broken binary or flag fails loudly (with the process log), never skips
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def fresh_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own (kube-scheduler too when its binary is there): for
    what installs deploy/ as it ships (its cluster-wide names, its namespace redis) or reads
    the whole cluster, so that no other test's objects are in the way, nor these in theirs."""
    assets = find_assets()
    if assets is None:
        pytest.skip(SKIP_REASON)
    plane = ControlPlane(assets, tmp_path_factory.mktemp("fresh-control-plane"))
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def controller_manager(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """kube-controller-manager (StatefulSets, volume binding) for one test module's tests."""
    if control_plane.controller_manager_binary is None:
        pytest.skip("kube-controller-manager is not in KUBEBUILDER_ASSETS")
    control_plane.start_controller_manager()
    try:
        yield control_plane
    finally:
        control_plane.stop_controller_manager()


@pytest.fixture(scope="session")
def kube_api(control_plane: ControlPlane) -> Iterator[ApiClient]:
    client = control_plane.api_client()
    yield client
    client.close()


@pytest.fixture
def kube_adapter(kube_api: ApiClient) -> KubernetesAdapter:
    return KubernetesAdapter(kube_api, instance="e2e", request_timeout=15)


@pytest.fixture
def namespace(kube_api: ApiClient) -> str:
    """A new namespace per test (never deleted: no namespace controller runs to finish it)."""
    name = f"e2e-{secrets.token_hex(4)}"
    create_namespace(kube_api, name)
    return name


@pytest.fixture
def run_id() -> str:
    """A label value that tells this test's cluster-scoped objects (Nodes) from others'."""
    return secrets.token_hex(4)
