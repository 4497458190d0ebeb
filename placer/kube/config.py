"""Find the cluster: in-cluster service account or a kubeconfig, with one clear error if neither."""

import os

from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.config.config_exception import ConfigException


class KubeConfigError(RuntimeError):
    """No usable Kubernetes configuration; the message names everything that was tried."""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def load_api_client(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    pool_size: int = 16,
) -> ApiClient:
    """An ``ApiClient`` for the cluster the process should talk to.

    With neither ``kubeconfig`` nor ``context`` and ``KUBERNETES_SERVICE_HOST`` set (a pod),
    the in-cluster service account is used; otherwise (or if that fails) the kubeconfig:
    ``kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``. An explicit kubeconfig or
    context is never silently replaced by the in-cluster identity.
    """
    tried: list[str] = []
    explicit = kubeconfig is not None or context is not None
    if not explicit:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = Configuration()
            try:
                kube_config.load_incluster_config(client_configuration=configuration)
            except ConfigException as exc:
                tried.append(f"in-cluster service account ({_one_line(exc)})")
            else:
                configuration.connection_pool_maxsize = pool_size
                return ApiClient(configuration)
        else:
            tried.append("in-cluster service account (KUBERNETES_SERVICE_HOST is not set)")

    env_paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    paths = [kubeconfig] if kubeconfig else env_paths or [os.path.expanduser("~/.kube/config")]
    where = "kubeconfig " + os.pathsep.join(paths) + (f" context {context!r}" if context else "")
    if not any(os.path.exists(p) for p in paths):
        tried.append(f"{where} (file not found)")
    else:
        configuration = Configuration()
        try:
            # a multi-path $KUBECONFIG is merged by the client, as kubectl does
            kube_config.load_kube_config(
                config_file=os.pathsep.join(paths),
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
            tried.append(f"{where} ({_one_line(exc)})")
        else:
            configuration.connection_pool_maxsize = pool_size
            return ApiClient(configuration)
    raise KubeConfigError("no usable Kubernetes configuration: tried " + "; ".join(tried))
