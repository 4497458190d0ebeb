#!/usr/bin/env bash
# Form the example Redis Cluster: the pods start cluster-enabled but empty, and no slot is
# served until this has run once. Run it after `kubectl apply -k deploy/examples/bind/` (or
# gate/), once the binder has placed the pods: it waits for every pod to be Ready and labelled
# with the role the binder chose (redis-role: master | replica), gives the masters the slots,
# and makes each replica follow its own shard's master, so Redis matches the placement.
#
#   deploy/examples/form-cluster.sh [NAMESPACE [CLUSTER [SHARDS]]]     (redis redis 3)
#
# It needs kubectl (get, wait and exec in the namespace); redis-cli runs inside the pods. A
# cluster already formed is left as it is.
set -euo pipefail
ns=${1:-redis}
cluster=${2:-redis}
shards=${3:-3}
port=${REDIS_PORT:-6379}
selector="app=redis,redis-cluster=$cluster"

k() { kubectl -n "$ns" "$@"; }
ip_of() { k get pod "$1" -o jsonpath='{.status.podIP}'; }
names() { k get pods -l "$1" -o name | sed 's|^pod/||' | sort; }

echo "waiting for $shards masters, each labelled by the binder"
for _ in $(seq 1 300); do
    [ "$(names "$selector,redis-role=master" | wc -l)" -ge "$shards" ] && break
    sleep 2
done
k wait --for=condition=Ready pod -l "$selector" --timeout=600s >/dev/null

masters=$(names "$selector,redis-role=master")
[ "$(echo "$masters" | wc -l)" -eq "$shards" ] || {
    echo "expected $shards pods labelled redis-role=master, found: $masters" >&2
    exit 1
}
first=$(echo "$masters" | head -1)
if k exec "$first" -- redis-cli -p "$port" cluster info | grep -q '^cluster_state:ok'; then
    echo "the cluster is formed already"
    exit 0
fi

addresses=()
for master in $masters; do addresses+=("$(ip_of "$master"):$port"); done
k exec "$first" -- redis-cli -p "$port" --cluster create "${addresses[@]}" --cluster-yes

for replica in $(names "$selector,redis-role=replica"); do
    shard=$(k get pod "$replica" -o jsonpath='{.metadata.labels.redis-shard}')
    master=$(names "$selector,redis-role=master,redis-shard=$shard" | head -1)
    id=$(k exec "$master" -- redis-cli -p "$port" cluster myid)
    echo "shard $shard: $replica follows $master"
    k exec "$master" -- redis-cli -p "$port" --cluster add-node "$(ip_of "$replica"):$port" \
        "$(ip_of "$master"):$port" --cluster-slave --cluster-master-id "$id"
done
k exec "$first" -- redis-cli -p "$port" --cluster check "$(ip_of "$first"):$port"
