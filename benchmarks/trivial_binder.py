"""A binder that decides nothing: each pending pod is bound the moment it is seen, round-robin.

    python -m benchmarks.trivial_binder --kubeconfig FILE --namespace NS --scheduler-name NAME
                                        [--threads 32]

The API server's own limit for a placer in its own process: the same watch, the same client
and the same Bindings (``KubernetesAdapter.bind_pod``) as ``redis-placer binder``, with no
snapshot, no solve, no Events. ``benchmarks.real_api`` runs it beside the binder.
"""

import argparse
import itertools
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from placer.kube.adapter import KubernetesAdapter, WatchExpired
from placer.kube.config import load_api_client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--scheduler-name", required=True)
    parser.add_argument("--threads", type=int, default=32)
    args = parser.parse_args()
    client = load_api_client(args.kubeconfig, pool_size=args.threads + 4)
    adapter = KubernetesAdapter(client, instance="trivial")
    nodes = itertools.cycle(
        sorted(n["metadata"]["name"] for n in adapter.list_nodes(label_selector="bench=node"))
    )
    lock = threading.Lock()
    seen: set[str] = set()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    pool = ThreadPoolExecutor(max_workers=args.threads)

    def take(pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName") != args.scheduler_name:
            return
        with lock:
            if meta["uid"] in seen:
                return
            seen.add(meta["uid"])
            node = next(nodes)
        pool.submit(adapter.bind_pod, args.namespace, meta["name"], meta["uid"], node)

    pods, version = adapter.list_pods_with_version(args.namespace)
    for pod in pods:
        take(pod)
    print("ready", flush=True)
    while not stop.is_set():
        try:
            for event in adapter.watch_pods(
                args.namespace, resource_version=version, timeout_seconds=5
            ):
                version = event.resource_version or version
                if event.type in ("ADDED", "MODIFIED"):
                    take(event.object)
        except WatchExpired:
            pods, version = adapter.list_pods_with_version(args.namespace)
            for pod in pods:
                take(pod)
    pool.shutdown(wait=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
