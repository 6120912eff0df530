# Shared helpers for the project's scripts. Source it: . "$(dirname "$0")/lib.sh"
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
RUN_DIR="$ROOT/.run"           # pid files, logs and data of services the scripts start
mkdir -p "$RUN_DIR"

say() { printf '\033[1m==>\033[0m %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# apt_get ARGS...: apt-get as root, waiting up to 10 minutes for dpkg's lock when another apt-get
# (a second script, unattended-upgrades) holds it, instead of failing at once.
apt_get() { as_root env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get -o DPkg::Lock::Timeout=600 "$@"; }

# apt_update: `apt-get update`, which takes the package lists' lock, and DPkg::Lock::Timeout does
# not cover that one (apt 2.6 fails at once): retry while another apt holds it, up to 10 minutes.
apt_update() {
  local err waited=0
  while ! err="$(apt_get update -qq 2>&1 >/dev/null)"; do
    case "$err" in
      *"Could not get lock"*) ;;
      *) printf '%s\n' "$err" >&2; return 1 ;;
    esac
    if [ "$waited" -ge 600 ]; then printf '%s\n' "$err" >&2; return 1; fi
    [ "$waited" -eq 0 ] && say "waiting for another apt-get to release the package lists (up to 10 minutes)"
    sleep 1
    waited=$((waited + 1))
  done
  [ -z "$err" ] || printf '%s\n' "$err" >&2
}

# apt_install PKG... : install Debian packages that are missing (one apt-get update per run).
apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing Debian packages: ${missing[*]}"
  if [ ! -f "$RUN_DIR/.apt-updated" ]; then apt_update && touch "$RUN_DIR/.apt-updated"; fi
  apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# python_env [extras]: the project's virtualenv, reinstalled only when pyproject.toml changes.
python_env() {
  local extras="${1:-}"
  local stamp="$VENV/.installed${extras:+-$extras}"
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv in .venv"
    python3 -m venv "$VENV"
  fi
  if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
    say "installing Python dependencies${extras:+ ($extras)}"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e "$ROOT${extras:+[$extras]}"
    drop_stray_packages
    touch "$stamp"
  fi
}

# js_deps: the Node packages of the interop tests (tests/interop/js: MQTT.js), exactly as its
# package-lock.json pins them, reinstalled only when that file changes. Node and npm come from
# Debian when missing (an npm bundled with another Node package counts as present).
js_deps() {
  local dir="$ROOT/tests/interop/js"
  local stamp="$dir/node_modules/.installed"
  command -v npm >/dev/null || apt_install nodejs npm
  if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
    say "installing Node packages (tests/interop/js)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    touch "$stamp"
  fi
}

# gmqtt's wheel installs top-level `tests` and `examples` packages into site-packages. A regular
# package there wins over the project's own `tests/` folder (a namespace package), so
# `from tests.integration.conftest import ...` would import gmqtt's tests. Remove them: nothing
# of gmqtt's uses them.
drop_stray_packages() {
  local site record
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  record="$(ls "$site"/gmqtt-*.dist-info/RECORD 2>/dev/null | head -n 1 || true)"
  [ -n "$record" ] || return 0
  for pkg in tests examples; do
    if grep -q "^$pkg/__init__.py," "$record" && [ -d "$site/$pkg" ]; then rm -rf "${site:?}/$pkg"; fi
  done
}

# run_as USER CMD...: run a command as another OS user (directly if already that user;
# runuser, or su, when root; sudo otherwise). stdin, stdout and stderr pass through.
run_as() {
  local user="$1"
  shift
  if [ "$(id -un)" = "$user" ]; then
    "$@"
  elif [ "$(id -u)" = 0 ]; then
    if command -v runuser >/dev/null; then
      runuser -u "$user" -- "$@"
    else
      su -s /bin/bash "$user" -c "$(printf '%q ' "$@")"
    fi
  else
    sudo -u "$user" -- "$@"
  fi
}

# started_here: a service script has just started its server on PORT. When the caller asked for a
# record (HOOKBRIDGE_SERVICES_STARTED names a file; scripts/test.sh does), note "SCRIPT PORT" there,
# so that it can stop what it started and leave alone what was already running.
started_here() {
  if [ -n "${HOOKBRIDGE_SERVICES_STARTED:-}" ]; then
    printf '%s %s\n' "$(basename "$0")" "$PORT" >>"$HOOKBRIDGE_SERVICES_STARTED"
  fi
}

# port_and_action DEFAULT_PORT "$@": sets PORT and ACTION (start|stop, default start) from a
# service script's arguments, in either order.
port_and_action() {
  PORT="$1"
  ACTION=start
  shift
  for arg in "$@"; do
    case "$arg" in
      start | stop) ACTION="$arg" ;;
      *[!0-9]* | '') echo "usage: $0 [PORT] [start|stop]" >&2; exit 2 ;;
      *) PORT="$arg" ;;
    esac
  done
}

# redis_pid PIDFILE: the pid PIDFILE holds, if that process is alive and is a redis-server (a
# stale pid file, or a pid reused by another process, is not ours to stop).
redis_pid() {
  local pid
  [ -f "$1" ] && pid="$(cat "$1" 2>/dev/null)" && [ -n "$pid" ] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q redis-server || return 1
  echo "$pid"
}

# kill_redis PIDFILE...: kill -9 the redis-servers these pid files name (test servers without
# persistence: nothing to save), wait until each is gone, and remove the files.
kill_redis() {
  local file pid pids=()
  for file in "$@"; do
    if pid="$(redis_pid "$file")"; then
      kill -KILL "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$file"
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  done
}
