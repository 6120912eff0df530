#!/usr/bin/env bash
# One command: install what the tests need, then run lint, types and the whole test suite.
# The test fixtures start the servers they use (Redis, Mosquitto, PostgreSQL, FerretDB) through the
# scripts here. FerretDB is started up front too: its first build (Go, about a minute) then happens
# here, with its own progress line, rather than inside the first test that needs it.
. "$(dirname "$0")/lib.sh"
apt_install redis-server mosquitto postgresql libpostgresql-jdbc-java
python_env test
cd "$ROOT"
bash scripts/ferretdb.sh 27018
say "ruff"
"$VENV/bin/ruff" check bridge actions tests bench
say "mypy"
"$VENV/bin/mypy"
say "pytest"
exec "$VENV/bin/pytest" -q "$@"
