#!/usr/bin/env bash
# Form the example Redis Cluster: the pods start cluster-enabled but empty, and no slot is
# served until this has run once. Run it after `kubectl apply -k deploy/examples/bind/` (or
# gate/), once the binder has placed the pods: it waits for every pod to be Ready and labelled
# with the role the binder chose (redis-role: master | replica), gives the masters the slots,
# and makes each replica follow its own shard's master, so Redis matches the placement.
#
# It needs kubectl (get, wait and exec in the namespace); redis-cli runs inside the pods. A
# cluster already formed is left as it is.
#
# No command's output is piped into a reader that may stop early (head, grep -q): under
# pipefail the writer's SIGPIPE would end the script with 141, at random.
set -euo pipefail
usage="usage: form-cluster.sh [--timeout SECONDS] [NAMESPACE [CLUSTER [SHARDS]]]
  defaults: namespace redis, cluster redis, 3 shards; waits at most 600 s for the binder's
  role labels and then for the pods to be Ready (REDIS_PORT: the Redis port, 6379)"
fail() { echo "form-cluster.sh: $1" >&2; exit "${2:-1}"; }

timeout=600
positional=()
while [ $# -gt 0 ]; do
    case $1 in
        -h | --help) echo "$usage"; exit 0 ;;
        --timeout) [ $# -ge 2 ] || fail "--timeout needs a number of seconds"$'\n'"$usage" 2
            timeout=$2; shift 2 ;;
        --timeout=*) timeout=${1#--timeout=}; shift ;;
        --) shift; positional+=("$@"); break ;;
        -*) fail "unknown option $1"$'\n'"$usage" 2 ;;
        *) positional+=("$1"); shift ;;
    esac
done
[ ${#positional[@]} -le 3 ] || fail "at most 3 arguments, got ${#positional[@]}: ${positional[*]}"$'\n'"$usage" 2
ns=${positional[0]:-redis}
cluster=${positional[1]:-redis}
shards=${positional[2]:-3}
port=${REDIS_PORT:-6379}
[[ $timeout =~ ^[0-9]+$ ]] || fail "--timeout: '$timeout' is not a whole number of seconds" 2
[[ $shards =~ ^[1-9][0-9]*$ ]] || fail "SHARDS: '$shards' is not a positive whole number" 2
selector="app=redis,redis-cluster=$cluster"

k() { kubectl -n "$ns" "$@"; }
ip_of() { k get pod "$1" -o jsonpath='{.status.podIP}'; }
names() { k get pods -l "$1" -o name | sed 's|^pod/||' | sort; }
first_line() { printf '%s\n' "${1%%$'\n'*}"; }

deadline=$((SECONDS + timeout))
echo "waiting up to $timeout s for $shards pods labelled redis-role=master by the binder" \
    "($selector in namespace $ns)"
while :; do
    masters=$(names "$selector,redis-role=master") ||
        fail "kubectl could not list the pods ($selector) in namespace $ns"
    found=$(grep -c . <<<"$masters" || true)
    [ "$found" -ge "$shards" ] && break
    [ "$SECONDS" -lt "$deadline" ] ||
        fail "gave up after $timeout s: $found of $shards pods ($selector) in namespace $ns are labelled redis-role=master; has the binder placed them?"
    sleep 2
done
left=$((deadline - SECONDS))
echo "waiting up to $((left > 1 ? left : 1)) s for the pods ($selector) to be Ready"
k wait --for=condition=Ready pod -l "$selector" --timeout="$((left > 1 ? left : 1))s" >/dev/null ||
    fail "gave up after $timeout s: not every pod ($selector) in namespace $ns is Ready"

[ "$found" -eq "$shards" ] || fail "expected $shards pods labelled redis-role=master, found $found: ${masters//$'\n'/ }"
first=$(first_line "$masters")
info=$(k exec "$first" -- redis-cli -p "$port" cluster info)
if [[ $info == *$'\n'cluster_state:ok* || $info == cluster_state:ok* ]]; then
    echo "the cluster is formed already"
    exit 0
fi

addresses=()
for master in $masters; do addresses+=("$(ip_of "$master"):$port"); done
k exec "$first" -- redis-cli -p "$port" --cluster create "${addresses[@]}" --cluster-yes

for replica in $(names "$selector,redis-role=replica"); do
    shard=$(k get pod "$replica" -o jsonpath='{.metadata.labels.redis-shard}')
    master=$(first_line "$(names "$selector,redis-role=master,redis-shard=$shard")")
    id=$(k exec "$master" -- redis-cli -p "$port" cluster myid)
    echo "shard $shard: $replica follows $master"
    k exec "$master" -- redis-cli -p "$port" --cluster add-node "$(ip_of "$replica"):$port" \
        "$(ip_of "$master"):$port" --cluster-slave --cluster-master-id "$id"
done
k exec "$first" -- redis-cli -p "$port" --cluster check "$(ip_of "$first"):$port"
