#!/usr/bin/env bash
# Start a local Redis (installing Debian's redis-server if missing); reuse one that answers.
#   scripts/redis.sh [PORT [redis-server options...]]
#   default port 6379; data and log under .run/redis-PORT/
. "$(dirname "$0")/lib.sh"
PORT="${1:-6379}"
shift || true
command -v redis-server >/dev/null || apt_install redis-server
if redis-cli -p "$PORT" ping >/dev/null 2>&1; then
  say "Redis already answering on 127.0.0.1:$PORT"
  exit 0
fi
DIR="$RUN_DIR/redis-$PORT"
mkdir -p "$DIR"
say "starting Redis on 127.0.0.1:$PORT (data in ${DIR#$ROOT/})"
redis-server --port "$PORT" --bind 127.0.0.1 --daemonize yes --dir "$DIR" \
  --pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log" --save "" --appendonly no "$@"
for _ in $(seq 1 50); do
  redis-cli -p "$PORT" ping >/dev/null 2>&1 && exit 0
  sleep 0.1
done
echo "Redis did not start on port $PORT; see $DIR/redis.log" >&2
exit 1
