#!/usr/bin/env bash
# A local Redis Sentinel set for the tests and for trying Sentinel pools (Debian's redis-server,
# installed if missing; a Sentinel is `redis-server --sentinel`, which is all Debian's
# redis-sentinel package adds).
#   scripts/redis_sentinel.sh [PORT] [start|stop]        default port 26400, action start
# On 127.0.0.1: the primary on PORT, one replica on PORT+1, three Sentinels on PORT+2..PORT+4
# watching the primary as master `hookbridge` (quorum 2, down after 3 s: with 1 s they also failed
# over a primary that was only busy, on a loaded machine), so killing the primary promotes the
# replica within a few seconds. Data, logs, pid files and the Sentinels' config
# files in .run/redis-sentinel-PORT/. No persistence.
# start: reuse the set when all five answer and the Sentinels agree on a master; otherwise stop
#        what is left of ours (a failover leaves the replica as the primary, the old primary
#        gone) and start the set afresh, the primary back on PORT. Returns once the Sentinels
#        see the replica and each other (a failover can happen from then on).
# stop:  stop the five processes of ours (pid files); never touches another server.
# Both are idempotent.
. "$(dirname "$0")/lib.sh"

port_and_action 26400 "$@"
DIR="$RUN_DIR/redis-sentinel-$PORT"
MASTER=hookbridge
REPLICA=$((PORT + 1))
SENTINELS=($((PORT + 2)) $((PORT + 3)) $((PORT + 4)))

stop_all() {
  local name files=()
  for name in primary replica sentinel-"${SENTINELS[0]}" sentinel-"${SENTINELS[1]}" sentinel-"${SENTINELS[2]}"; do
    files+=("$DIR/$name.pid")
  done
  kill_redis "${files[@]}"
}

answers() { redis-cli -p "$1" ping >/dev/null 2>&1; }

healthy() {
  local port
  for port in "$PORT" "$REPLICA" "${SENTINELS[@]}"; do
    answers "$port" || return 1
  done
  redis-cli -p "${SENTINELS[0]}" sentinel get-master-addr-by-name "$MASTER" 2>/dev/null | grep -q 127.0.0.1
}

if [ "$ACTION" = stop ]; then
  say "stopping the Redis Sentinel set on 127.0.0.1:$PORT..$((PORT + 4))"
  stop_all
  exit 0
fi

command -v redis-server >/dev/null || apt_install redis-server
if healthy; then
  say "Redis Sentinel set already answering on 127.0.0.1:$PORT..$((PORT + 4))"
  exit 0
fi
stop_all
for port in "$PORT" "$REPLICA" "${SENTINELS[@]}"; do
  if answers "$port"; then
    echo "127.0.0.1:$port answers but is not this script's: stop it first" >&2
    exit 1
  fi
done
mkdir -p "$DIR"
# No persistence, and a fresh set starts empty: a replica's full sync leaves an RDB file behind,
# which a server started on it would load.
rm -f "$DIR"/*.rdb
say "starting a Redis Sentinel set: primary 127.0.0.1:$PORT, replica :$REPLICA, Sentinels :${SENTINELS[*]} (${DIR#$ROOT/})"
common=(--bind 127.0.0.1 --daemonize yes --dir "$DIR" --save "" --appendonly no)
redis-server --port "$PORT" --pidfile "$DIR/primary.pid" --logfile "$DIR/primary.log" \
  --dbfilename primary.rdb "${common[@]}"
redis-server --port "$REPLICA" --pidfile "$DIR/replica.pid" --logfile "$DIR/replica.log" \
  --dbfilename replica.rdb --replicaof 127.0.0.1 "$PORT" "${common[@]}"
for port in "${SENTINELS[@]}"; do
  # A Sentinel rewrites its config file (what it learns): a fresh one at each start.
  cat >"$DIR/sentinel-$port.conf" <<EOF
port $port
bind 127.0.0.1
daemonize yes
pidfile $DIR/sentinel-$port.pid
logfile $DIR/sentinel-$port.log
dir $DIR
sentinel monitor $MASTER 127.0.0.1 $PORT 2
sentinel down-after-milliseconds $MASTER 3000
sentinel failover-timeout $MASTER 10000
sentinel parallel-syncs $MASTER 1
EOF
  redis-server "$DIR/sentinel-$port.conf" --sentinel
done
started_here
# Ready when the replica is in sync and every Sentinel knows the replica and the two others.
for _ in $(seq 1 300); do
  ready=1
  redis-cli -p "$REPLICA" info replication 2>/dev/null | grep -q 'master_link_status:up' || ready=0
  for port in "${SENTINELS[@]}"; do
    state="$(redis-cli -p "$port" sentinel master "$MASTER" 2>/dev/null | tr '\n' ' ')" || state=""
    [[ "$state" == *"num-slaves 1 "* && "$state" == *"num-other-sentinels 2 "* ]] || ready=0
  done
  [ "$ready" = 1 ] && exit 0
  sleep 0.1
done
echo "the Redis Sentinel set on port $PORT did not come up in 30 s; see $DIR/*.log" >&2
exit 1
