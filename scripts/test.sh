#!/usr/bin/env bash
# One command: install what the tests need, then run lint, types and the whole test suite.
#   scripts/test.sh [--keep-services] [pytest arguments...]
# The test fixtures start the servers they use (Redis, Mosquitto, PostgreSQL, FerretDB, Cassandra,
# MariaDB) through the scripts here. FerretDB is started up front too: its first build (Go, about a
# minute) then happens here, with its own progress line, rather than inside the first test that
# needs it; MariaDB too (its first start creates its data directory).
# At the end (also on failure or Ctrl-C) it stops the servers this run started; servers that were
# already running and were reused keep running. --keep-services (or KEEP_SERVICES=1) keeps them
# all, for fast re-runs, and prints the commands that stop them. The exit status is pytest's
# (or that of the first step that failed).
. "$(dirname "$0")/lib.sh"

keep="${KEEP_SERVICES:-0}"
if [ "${1:-}" = --keep-services ]; then
  keep=1
  shift
fi
# Each service script notes here what it started (lib.sh's started_here): the fixtures' starts too.
export HOOKBRIDGE_SERVICES_STARTED="$RUN_DIR/test-$$.started"
: >"$HOOKBRIDGE_SERVICES_STARTED"

# Stop (or with --keep-services, list) what this run started, newest first. The exit status stays
# the one the run ended with: pytest's, or that of the step that failed.
finish() {
  local status=$? script port
  trap - EXIT INT TERM
  if [ -n "$(jobs -p)" ]; then
    say "waiting for the background Cassandra start to finish"
    wait || true
  fi
  while read -r script port; do
    if [ "$keep" = 1 ]; then
      say "kept running: scripts/$script $port (stop it with: scripts/$script $port stop)"
    else
      bash "$ROOT/scripts/$script" "$port" stop || say "could not stop scripts/$script $port"
    fi
  done < <(tac "$HOOKBRIDGE_SERVICES_STARTED" | awk '!seen[$0]++')
  rm -f "$HOOKBRIDGE_SERVICES_STARTED"
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# systemd: only its `systemd-analyze verify` (deploy/hookbridge.service, tests/packaging/test_systemd.py), 10 MB.
apt_install redis-server mosquitto mosquitto-clients postgresql libpostgresql-jdbc-java mariadb-server mariadb-client libmariadb-java \
  openjdk-17-jre-headless maven chromium systemd
python_env test
js_deps
# The Spark reports' connector jars (Maven Central) and JDBC driver (Debian), once into .spark-jars/.
bash "$ROOT/scripts/spark_jars.sh"
# Cassandra takes 15-25 s to start (longer the first time: Maven fetches it). Start it now, in the
# background, so it overlaps lint, types and the first tests; the test fixtures run the same script,
# which waits for this start (one invocation per port at a time) and then reuses the node.
bash "$ROOT/scripts/cassandra.sh" 9042 >"$RUN_DIR/cassandra-9042.start.log" 2>&1 &
cd "$ROOT"
bash scripts/ferretdb.sh 27018
bash scripts/mariadb.sh 3307  # the MySQL backend's tests (tests/conformance, tests/integration/test_mysql.py)
say "ruff"
"$VENV/bin/ruff" check bridge actions spark_analytics tests bench
say "mypy"
"$VENV/bin/mypy"
say "pytest"
# In a random order (-p randomly), name the seed (pytest -q does not): --randomly-seed=N repeats it.
case " $* " in
  *" -p randomly "*)
    case " $* " in
      *" --randomly-seed="*) ;;
      *) set -- "$@" "--randomly-seed=$((RANDOM * 32768 + RANDOM))" ;;
    esac
    say "random order: pytest $*"
    ;;
esac
"$VENV/bin/pytest" -q "$@"
