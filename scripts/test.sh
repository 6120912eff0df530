#!/usr/bin/env bash
# One command: install what the tests need, then run lint, types and the whole test suite.
# The test fixtures start the servers they use (Redis, Mosquitto, PostgreSQL) through the scripts here.
. "$(dirname "$0")/lib.sh"
apt_install redis-server mosquitto postgresql libpostgresql-jdbc-java
python_env test
cd "$ROOT"
say "ruff"
"$VENV/bin/ruff" check bridge actions tests bench
say "mypy"
"$VENV/bin/mypy"
say "pytest"
exec "$VENV/bin/pytest" -q "$@"
