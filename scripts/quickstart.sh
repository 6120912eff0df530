#!/usr/bin/env bash
# One command: install what is missing, start a local Redis, run the bridge with the
# embedded broker on 127.0.0.1:1883, config/bridge.conf and rules/redis.conf.
. "$(dirname "$0")/lib.sh"
apt_install redis-server
python_env
"$ROOT/scripts/redis.sh" 6379
cd "$ROOT"
say "starting hookbridge (Ctrl-C stops it; SIGHUP reloads rules/)"
exec "$VENV/bin/hookbridge" run -c config/bridge.conf -r rules "$@"
