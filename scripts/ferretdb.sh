#!/usr/bin/env bash
# A local MongoDB-wire-protocol server for the tests: FerretDB v1 (embedded, SQLite backend) behind
# the small Go program in scripts/ferretdb/. No MongoDB server is packaged anywhere we can reach.
#   scripts/ferretdb.sh [PORT] [start|stop]        default port 27017, default action start
# start: reuse a server that already answers MongoDB's `ping` on 127.0.0.1:PORT; otherwise build the
#        runner if needed and start it detached, data in .run/ferretdb-PORT/data/ (one SQLite file per
#        database), log and pid file in .run/ferretdb-PORT/; wait until it answers.
# stop:  stop the server recorded in .run/ferretdb-PORT/ (SIGTERM, then SIGKILL after 10 s); never
#        touches a server it did not start. Data is kept: a later start serves it again.
# TLS: with HOOKBRIDGE_FERRETDB_TLS=HOST:PORT and HOOKBRIDGE_FERRETDB_TLS_CERT / _KEY (PEM files)
# in the environment, start also listens with TLS there (readiness is still checked on PORT).
# Both are idempotent. The build needs Go >= 1.21 (go.mod asks for 1.24; an older go fetches that
# toolchain through the module proxy). The binary goes to .run/ferretdb/bin/ and is rebuilt only when
# scripts/ferretdb/*.go, go.mod or go.sum change. Modules and build cache: Go's own (shared by all
# checkouts, so a fresh clone builds in seconds once the machine has built it; the first build
# downloads ~130 MB of modules and compiles for about a minute), or .run/go/ when Go has none.
. "$(dirname "$0")/lib.sh"

port_and_action 27017 "$@"

SRC="$ROOT/scripts/ferretdb"
BIN="$RUN_DIR/ferretdb/bin/ferretdb-runner"
BASE="$RUN_DIR/ferretdb-$PORT"
PIDFILE="$BASE/ferretdb.pid"
LOG="$BASE/ferretdb.log"

# Does a MongoDB-protocol server answer on 127.0.0.1:PORT? One OP_MSG {ping: 1, $db: "admin"}, raw
# (the system python3; no driver needed), so a different service on the port does not count.
ready() {
  python3 - "$PORT" <<'PY' 2>/dev/null
import socket, struct, sys
body = b"\x10ping\x00" + struct.pack("<i", 1) + b"\x02$db\x00" + struct.pack("<i", 6) + b"admin\x00"
doc = struct.pack("<i", len(body) + 5) + body + b"\x00"
msg = struct.pack("<iiiiI", 16 + 4 + 1 + len(doc), 1, 0, 2013, 0) + b"\x00" + doc
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2) as s:
    s.settimeout(2)
    s.sendall(msg)
    data = b""
    while len(data) < 4 or len(data) < struct.unpack("<i", data[:4])[0]:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
ok = len(data) >= 16 and struct.unpack("<i", data[12:16])[0] == 2013
sys.exit(0 if ok and b"\x01ok\x00" + struct.pack("<d", 1.0) in data else 1)
PY
}

# The pid in our pid file, if that process is alive and is our runner.
our_pid() {
  local pid
  [ -f "$PIDFILE" ] && pid="$(cat "$PIDFILE" 2>/dev/null)" && [ -n "$pid" ] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "ferretdb-runner -listen-addr 127.0.0.1:$PORT " || return 1
  echo "$pid"
}

# Go's module and build caches, or .run/go/ when it has none (no HOME) or cannot write them.
go_caches() {
  local mod cache
  mod="$(go env GOMODCACHE 2>/dev/null || true)"
  cache="$(go env GOCACHE 2>/dev/null || true)"
  if [ -z "$mod" ] || [ -z "$cache" ] || [ "$cache" = off ] \
    || ! mkdir -p "$mod" "$cache" 2>/dev/null || [ ! -w "$mod" ] || [ ! -w "$cache" ]; then
    # -modcacherw: so that `rm -rf .run` can delete the module cache
    export GOPATH="$RUN_DIR/go" GOMODCACHE="$RUN_DIR/go/mod" GOCACHE="$RUN_DIR/go/build" \
      GOFLAGS="-modcacherw${GOFLAGS:+ $GOFLAGS}"
  fi
}

# Build the runner unless the binary was built from the current sources (a hash of them, not mtimes:
# a checkout resets mtimes). One build at a time, whatever the port.
build() {
  local sum
  sum="$(cd "$SRC" && cat go.mod go.sum ./*.go | sha256sum | cut -d ' ' -f 1)"
  [ -x "$BIN" ] && [ "$(cat "$BIN.sha256" 2>/dev/null)" = "$sum" ] && return 0
  mkdir -p "$(dirname "$BIN")"
  exec 8>"$RUN_DIR/ferretdb-build.lock"
  flock 8
  if [ ! -x "$BIN" ] || [ "$(cat "$BIN.sha256" 2>/dev/null)" != "$sum" ]; then
    command -v go >/dev/null || {
      echo "Go is needed to build FerretDB (Debian's golang-go is too old: install Go >= 1.21 from go.dev)" >&2
      exit 1
    }
    go_caches
    say "building FerretDB runner into ${BIN#$ROOT/} (the first build takes a minute or two)"
    # Into a new file, then renamed: a running server keeps its own binary.
    (cd "$SRC" && CGO_ENABLED=0 go build -trimpath -o "$BIN.tmp" .) 8>&- \
      || { rm -f "$BIN.tmp"; echo "building scripts/ferretdb failed" >&2; exit 1; }
    mv -f "$BIN.tmp" "$BIN"
    echo "$sum" >"$BIN.sha256"
  fi
  exec 8>&-
}

# One invocation at a time per port (parallel test workers); the lock fd is closed for the server.
exec 9>"$RUN_DIR/ferretdb-$PORT.lock"
flock 9

if [ "$ACTION" = stop ]; then
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    say "FerretDB: no server of ours running on port $PORT"
    exit 0
  fi
  say "stopping FerretDB on 127.0.0.1:$PORT (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "FerretDB (pid $pid) ignored SIGTERM for 10 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  if kill -0 "$pid" 2>/dev/null; then
    echo "FerretDB (pid $pid) on 127.0.0.1:$PORT did not stop; see $LOG" >&2
    exit 1
  fi
  rm -f "$PIDFILE"
  exit 0
fi

fail_start() {
  our_pid >/dev/null || rm -f "$PIDFILE"
  tail -n 30 "$LOG" >&2 || true
  echo "FerretDB did not start on 127.0.0.1:$PORT ($1); see $LOG" >&2
  exit 1
}

if ready; then
  say "FerretDB (or another MongoDB server) already answering on 127.0.0.1:$PORT"
  exit 0
fi

# Ours and still starting up, or stopping: wait until it answers or is gone.
if our_pid >/dev/null; then
  say "FerretDB in ${BASE#$ROOT/} has a live process; waiting"
  for _ in $(seq 1 100); do
    ready || ! our_pid >/dev/null && break
    sleep 0.1
  done
  ready && exit 0
  our_pid >/dev/null && fail_start "its process is alive but does not answer"
fi

build
mkdir -p "$BASE/data"
say "starting FerretDB on 127.0.0.1:$PORT (data in ${BASE#$ROOT/}/data, log in ${LOG#$ROOT/})"
printf '\n--- %s: starting on 127.0.0.1:%s\n' "$(date -Is)" "$PORT" >>"$LOG"
TLS_ARGS=()
if [ -n "${HOOKBRIDGE_FERRETDB_TLS:-}" ]; then
  TLS_ARGS=(-listen-tls "$HOOKBRIDGE_FERRETDB_TLS" -tls-cert-file "$HOOKBRIDGE_FERRETDB_TLS_CERT"
    -tls-key-file "$HOOKBRIDGE_FERRETDB_TLS_KEY")
  say "FerretDB also listens with TLS on $HOOKBRIDGE_FERRETDB_TLS"
fi
# Its own session (setsid), immune to the caller's hangup and terminal; no lock fds.
(cd "$BASE" && exec setsid nohup "$BIN" -listen-addr "127.0.0.1:$PORT" -data-dir "$BASE/data" "${TLS_ARGS[@]}" \
  </dev/null >>"$LOG" 2>&1 8>&- 9>&-) &
echo $! >"$PIDFILE"
started_here
for _ in $(seq 1 150); do
  ready && exit 0
  our_pid >/dev/null || fail_start "it exited"
  sleep 0.1
done
fail_start "no answer after 15 s"
