#!/usr/bin/env bash
# A local Spark standalone cluster for the reports (`hookbridge report ... --master spark://127.0.0.1:PORT`):
# a master and WORKERS workers, from the project's own PySpark (its bin/spark-class), loopback only.
#   scripts/spark_cluster.sh [PORT] [start|stop|status] [WORKERS]   default port 7077, start, 2 workers
# start:  reuse a master that already answers on 127.0.0.1:PORT; otherwise start one. Then start
#         workers until WORKERS are alive on that master (never stops one: more than asked is fine).
#         Logs, pid files and the workers' folders in .run/spark-PORT/. Each worker offers
#         SPARK_WORKER_CORES cores (default 1) and SPARK_WORKER_MEMORY (default 1g).
# stop:   stop the workers and the master whose pid files are in .run/spark-PORT/; never another's.
# status: the master's URL and its alive workers (from its web UI's JSON); exit 3 if it is down.
# All three are idempotent. The master's web UI is on SPARK_MASTER_WEBUI_PORT (default PORT+1003, 8080 for 7077).
. "$(dirname "$0")/lib.sh"

PORT=7077
ACTION=start
WORKERS=2
action_seen=0
for arg in "$@"; do
  case "$arg" in
    start | stop | status) ACTION="$arg"; action_seen=1 ;;
    *[!0-9]* | '') echo "usage: $0 [PORT] [start|stop|status] [WORKERS]" >&2; exit 2 ;;
    *) if [ "$action_seen" = 1 ]; then WORKERS="$arg"; else PORT="$arg"; fi ;;
  esac
done
UI_PORT="${SPARK_MASTER_WEBUI_PORT:-$((PORT + 1003))}"
DIR="$RUN_DIR/spark-$PORT"
MASTER_URL="spark://127.0.0.1:$PORT"
# Loopback only: the master, the workers and their web UIs bind to SPARK_LOCAL_IP.
export SPARK_LOCAL_IP=127.0.0.1
export SPARK_LOG_DIR="$DIR/logs" SPARK_PID_DIR="$DIR" SPARK_NO_DAEMONIZE=1

# spark_pid PIDFILE: the pid PIDFILE holds, if that process is alive and is a Spark daemon.
spark_pid() {
  local pid
  [ -f "$1" ] && pid="$(cat "$1" 2>/dev/null)" && [ -n "$pid" ] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'org.apache.spark.deploy' || return 1
  echo "$pid"
}

# The master's state as its web UI gives it (JSON): the number of alive workers, or nothing.
alive_workers() {
  curl -fsS --max-time 5 "http://127.0.0.1:$UI_PORT/json/" 2>/dev/null |
    "$VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["aliveworkers"])' 2>/dev/null
}

master_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

stop_pidfile() {
  local pid
  if pid="$(spark_pid "$1")"; then
    kill -TERM "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    say "stopped $(basename "$1" .pid) (pid $pid)"
  fi
  rm -f "$1"
}

case "$ACTION" in
  stop)
    if [ ! -d "$DIR" ]; then say "Spark: no cluster of ours on port $PORT"; exit 0; fi
    for file in "$DIR"/worker-*.pid; do [ -e "$file" ] && stop_pidfile "$file"; done
    stop_pidfile "$DIR/master.pid"
    exit 0
    ;;
  status)
    if ! master_answers; then echo "no Spark master on 127.0.0.1:$PORT"; exit 3; fi
    echo "$MASTER_URL: $(alive_workers || echo '?') alive workers (web UI http://127.0.0.1:$UI_PORT/)"
    exit 0
    ;;
esac

python_env test
SPARK_HOME="$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
# The executors run the reports' Python code with the project's own interpreter.
export PYSPARK_PYTHON="$VENV/bin/python"
command -v java >/dev/null || apt_install openjdk-17-jre-headless
mkdir -p "$DIR/logs"

# daemon NAME CLASS ARGS...: a Spark daemon in the background, its pid in $DIR/NAME.pid.
daemon() {
  local name="$1"
  shift
  setsid "$SPARK_HOME/bin/spark-class" "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/$name.pid"
}

if master_answers; then
  say "Spark master already answering on 127.0.0.1:$PORT"
else
  say "starting a Spark master on $MASTER_URL (web UI http://127.0.0.1:$UI_PORT/, logs in ${DIR#$ROOT/}/logs)"
  daemon master org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$PORT" --webui-port "$UI_PORT"
  started_here
  for _ in $(seq 1 600); do
    master_answers && [ -n "$(alive_workers)" ] && break
    spark_pid "$DIR/master.pid" >/dev/null || { echo "the Spark master exited; see $DIR/logs/master.log" >&2; exit 1; }
    sleep 0.1
  done
  master_answers || { echo "the Spark master did not start in 60 s; see $DIR/logs/master.log" >&2; exit 1; }
fi

alive="$(alive_workers || echo 0)"
index=0
while [ "$alive" -lt "$WORKERS" ]; do
  index=$((index + 1))
  spark_pid "$DIR/worker-$index.pid" >/dev/null && continue  # ours, still registering
  say "starting Spark worker $index (${SPARK_WORKER_CORES:-1} core, ${SPARK_WORKER_MEMORY:-1g})"
  mkdir -p "$DIR/work-$index"
  daemon "worker-$index" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --webui-port 0 \
    --cores "${SPARK_WORKER_CORES:-1}" --memory "${SPARK_WORKER_MEMORY:-1g}" --work-dir "$DIR/work-$index" "$MASTER_URL"
  alive=$((alive + 1))
done
# Wait until the master counts them all: a report started before would get fewer executors.
for _ in $(seq 1 600); do
  [ "$(alive_workers || echo 0)" -ge "$WORKERS" ] && { say "Spark cluster ready: $MASTER_URL, $WORKERS workers"; exit 0; }
  sleep 0.1
done
echo "Spark workers did not all register in 60 s; see $DIR/logs/" >&2
exit 1
