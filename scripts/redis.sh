#!/usr/bin/env bash
# A local Redis for the tests and for trying the bridge (installs Debian's redis-server if missing).
#   scripts/redis.sh [PORT] [start|stop] [redis-server options...]   default port 6379, action start
# start: reuse a server that already answers on 127.0.0.1:PORT; otherwise start one in the
#        background (no persistence unless the options ask for it: e.g. --appendonly yes), data,
#        log and pid file in .run/redis-PORT/. Options (from the first argument starting with `-`)
#        go to redis-server as they are.
# stop:  stop the server whose pid file is in .run/redis-PORT/ (SIGTERM: Redis then does what
#        SHUTDOWN does, writing its append-only file if it has one); never touches another one.
# Both are idempotent.
. "$(dirname "$0")/lib.sh"

positional=()
while [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; do
  positional+=("$1")
  shift
done
port_and_action 6379 "${positional[@]}"
DIR="$RUN_DIR/redis-$PORT"
PIDFILE="$DIR/redis.pid"

own_pid() { redis_pid "$PIDFILE"; }

if [ "$ACTION" = stop ]; then
  if ! pid="$(own_pid)"; then
    say "Redis: no server of ours running on port $PORT"
    exit 0
  fi
  say "stopping Redis on 127.0.0.1:$PORT (pid $pid)"
  kill -TERM "$pid"
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
  echo "Redis (pid $pid) on 127.0.0.1:$PORT did not stop in 30 s; see $DIR/redis.log" >&2
  exit 1
fi

command -v redis-server >/dev/null || apt_install redis-server
if redis-cli -p "$PORT" ping >/dev/null 2>&1; then
  say "Redis already answering on 127.0.0.1:$PORT"
  exit 0
fi
mkdir -p "$DIR"
say "starting Redis on 127.0.0.1:$PORT (data in ${DIR#$ROOT/})"
redis-server --port "$PORT" --bind 127.0.0.1 --daemonize yes --dir "$DIR" \
  --pidfile "$PIDFILE" --logfile "$DIR/redis.log" --save "" --appendonly no "$@"
started_here
for _ in $(seq 1 50); do
  redis-cli -p "$PORT" ping >/dev/null 2>&1 && exit 0
  sleep 0.1
done
echo "Redis did not start on port $PORT; see $DIR/redis.log" >&2
exit 1
