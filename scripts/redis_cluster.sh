#!/usr/bin/env bash
# A local Redis Cluster for the tests and for trying `type = cluster` pools (Debian's redis-server,
# installed if missing).
#   scripts/redis_cluster.sh [PORT] [start|stop|status]      default port 7000, action start
# On 127.0.0.1: six nodes on PORT..PORT+5, made one cluster by `redis-cli --cluster create
# --cluster-replicas 1`: three masters, each with one replica (node timeout 3 s: killing a master
# promotes its replica within a few seconds). Data, logs, pid files and the nodes' cluster config
# files (nodes-PORT.conf, which a node rewrites as it learns) in .run/redis-cluster-PORT/. No
# persistence.
# start:  reuse the cluster when all six nodes answer and report cluster_state:ok; otherwise stop
#         what is left of ours and create the cluster afresh (empty). Returns once every node
#         reports cluster_state:ok and every replica is in sync.
# stop:   stop the six nodes of ours (pid files); never touches another server.
# status: `cluster nodes` as the first node that answers sees them; exit 1 when none answers.
# All are idempotent.
. "$(dirname "$0")/lib.sh"

PORT=7000
ACTION=start
for arg in "$@"; do
  case "$arg" in
    start | stop | status) ACTION="$arg" ;;
    *[!0-9]* | '') echo "usage: $0 [PORT] [start|stop|status]" >&2; exit 2 ;;
    *) PORT="$arg" ;;
  esac
done
DIR="$RUN_DIR/redis-cluster-$PORT"
NODES=($PORT $((PORT + 1)) $((PORT + 2)) $((PORT + 3)) $((PORT + 4)) $((PORT + 5)))

stop_all() {
  local port files=()
  for port in "${NODES[@]}"; do files+=("$DIR/node-$port.pid"); done
  kill_redis "${files[@]}"
}

answers() { redis-cli -p "$1" ping >/dev/null 2>&1; }

cluster_ok() { redis-cli -p "$1" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }

healthy() {
  local port
  for port in "${NODES[@]}"; do
    answers "$port" && cluster_ok "$port" || return 1
  done
}

if [ "$ACTION" = stop ]; then
  say "stopping the Redis Cluster on 127.0.0.1:$PORT..$((PORT + 5))"
  stop_all
  exit 0
fi
if [ "$ACTION" = status ]; then
  for port in "${NODES[@]}"; do
    if answers "$port"; then
      redis-cli -p "$port" cluster info | grep '^cluster_state'
      redis-cli -p "$port" cluster nodes
      exit 0
    fi
  done
  echo "no node of the Redis Cluster on 127.0.0.1:$PORT..$((PORT + 5)) answers" >&2
  exit 1
fi

command -v redis-server >/dev/null || apt_install redis-server
if healthy; then
  say "Redis Cluster already answering on 127.0.0.1:$PORT..$((PORT + 5))"
  exit 0
fi
stop_all
for port in "${NODES[@]}"; do
  if answers "$port"; then
    echo "127.0.0.1:$port answers but is not this script's: stop it first" >&2
    exit 1
  fi
done
mkdir -p "$DIR"
# A fresh cluster: nodes forget the old one (their nodes-PORT.conf) and start empty.
rm -f "$DIR"/*.rdb "$DIR"/nodes-*.conf
say "starting a Redis Cluster: 3 masters + 3 replicas on 127.0.0.1:$PORT..$((PORT + 5)) (${DIR#$ROOT/})"
for port in "${NODES[@]}"; do
  redis-server --port "$port" --bind 127.0.0.1 --daemonize yes --dir "$DIR" \
    --pidfile "$DIR/node-$port.pid" --logfile "$DIR/node-$port.log" --dbfilename "node-$port.rdb" \
    --save "" --appendonly no --cluster-enabled yes --cluster-config-file "nodes-$port.conf" \
    --cluster-node-timeout 3000
done
started_here
for port in "${NODES[@]}"; do
  for _ in $(seq 1 50); do answers "$port" && break; sleep 0.1; done
done
addresses=()
for port in "${NODES[@]}"; do addresses+=("127.0.0.1:$port"); done
redis-cli --cluster create "${addresses[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 || {
  cat "$DIR/create.log" >&2
  exit 1
}
# Ready when every node sees the cluster ok and every replica has its master's data.
for _ in $(seq 1 300); do
  ready=1
  for port in "${NODES[@]}"; do
    cluster_ok "$port" || ready=0
    role="$(redis-cli -p "$port" info replication 2>/dev/null | tr -d '\r')" || role=""
    if [[ "$role" == *"role:slave"* && "$role" != *"master_link_status:up"* ]]; then ready=0; fi
  done
  [ "$ready" = 1 ] && exit 0
  sleep 0.1
done
echo "the Redis Cluster on port $PORT did not come up in 30 s; see $DIR/*.log" >&2
exit 1
