#!/usr/bin/env bash
# One command: install what the tests need, then run lint, types and the whole test suite.
# The test fixtures start the servers they use (Redis, Mosquitto, PostgreSQL, FerretDB, Cassandra)
# through the scripts here. FerretDB is started up front too: its first build (Go, about a minute)
# then happens here, with its own progress line, rather than inside the first test that needs it.
. "$(dirname "$0")/lib.sh"
apt_install redis-server mosquitto postgresql libpostgresql-jdbc-java openjdk-17-jre-headless maven chromium
python_env test
# The Spark reports' connector jars (Maven Central) and JDBC driver (Debian), once into .spark-jars/.
bash "$ROOT/scripts/spark_jars.sh"
# Cassandra takes 15-25 s to start (longer the first time: Maven fetches it). Start it now, in the
# background, so it overlaps lint, types and the first tests; the test fixtures run the same script,
# which waits for this start (one invocation per port at a time) and then reuses the node.
bash "$ROOT/scripts/cassandra.sh" 9042 >"$RUN_DIR/cassandra-9042.start.log" 2>&1 &
cd "$ROOT"
bash scripts/ferretdb.sh 27018
say "ruff"
"$VENV/bin/ruff" check bridge actions spark_analytics tests bench
say "mypy"
"$VENV/bin/mypy"
say "pytest"
exec "$VENV/bin/pytest" -q "$@"
