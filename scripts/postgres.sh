#!/usr/bin/env bash
# A local PostgreSQL for the tests and for trying the bridge (installs Debian's postgresql if missing).
#   scripts/postgres.sh [PORT] [start|stop]        default port 5432, default action start
# start: reuse a server that already answers on 127.0.0.1:PORT; otherwise create (once) and start
#        a cluster in .run/postgres-PORT/ (data/, postgres.log, unix socket), listening on
#        127.0.0.1 only (password auth over TCP, trust over the unix socket). Then make sure the
#        role and database exist: HOOKBRIDGE_PG_USER / HOOKBRIDGE_PG_PASSWORD / HOOKBRIDGE_PG_DATABASE,
#        default hookbridge / hookbridge / mqtt. With HOOKBRIDGE_PG_TLS_CERT and HOOKBRIDGE_PG_TLS_KEY
#        (PEM files) set when it starts, the server also accepts TLS with that certificate.
# stop:  stop the cluster in .run/postgres-PORT/ (fast shutdown); never touches a server it did not start.
# Both are idempotent. As root the cluster runs as the `postgres` OS user (initdb and pg_ctl refuse
# root); otherwise as the current user.
. "$(dirname "$0")/lib.sh"

port_and_action 5432 "$@"

PG_USER="${HOOKBRIDGE_PG_USER:-hookbridge}"
PG_PASSWORD="${HOOKBRIDGE_PG_PASSWORD:-hookbridge}"
PG_DATABASE="${HOOKBRIDGE_PG_DATABASE:-mqtt}"
unset PGOPTIONS PGSERVICE PGSERVICEFILE  # would change what the client tools below connect to

# The highest installed major version's binaries (Debian keeps them off PATH).
pg_bin() {
  local version
  version="$(ls /usr/lib/postgresql 2>/dev/null | grep -E '^[0-9]+$' | sort -n | tail -n 1 || true)"
  [ -n "$version" ] && [ -x "/usr/lib/postgresql/$version/bin/pg_ctl" ] || return 1
  echo "/usr/lib/postgresql/$version/bin"
}

# Where the cluster lives: .run/postgres-PORT, unless the `postgres` user (as root) cannot reach the
# checkout, or the unix socket path would exceed the kernel's 107 bytes; then a directory in /var/tmp.
pg_base() {
  local base="$RUN_DIR/postgres-$PORT"
  if [ $((${#base} + 10 + ${#PORT})) -gt 107 ] \
    || { [ "$(id -u)" = 0 ] && ! (cd / && run_as postgres test -x "$RUN_DIR"); }; then
    base="/var/tmp/hookbridge-postgres-$PORT-$(printf %s "$ROOT" | md5sum | cut -c 1-8)"
  fi
  echo "$base"
}

BASE="$(pg_base)"
DATA="$BASE/data"
LOG="$BASE/postgres.log"

# The OS user the cluster runs as: whoever owns an existing data dir, else postgres (root) or me.
if [ -d "$DATA" ]; then
  OWNER="$(stat -c %U "$DATA")"
elif [ "$(id -u)" = 0 ]; then
  OWNER=postgres
else
  OWNER="$(id -un)"
fi
# Run as the cluster's owner, from a directory it can read (pg_ctl and initdb look at the cwd).
as_owner() { (cd / && run_as "$OWNER" "$@"); }

ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -t 2 >/dev/null 2>&1; }
running() { [ -f "$DATA/postmaster.pid" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }
fail_start() {
  tail -n 30 "$LOG" >&2 || true
  echo "PostgreSQL did not start on 127.0.0.1:$PORT ($1); see $LOG" >&2
  exit 1
}

# One invocation at a time per port (parallel test workers); the lock fd is closed for the server.
exec 9>"$RUN_DIR/postgres-$PORT.lock"
flock 9

if [ "$ACTION" = stop ]; then
  if ! BIN="$(pg_bin)" || [ ! -d "$DATA" ] || ! running; then
    say "PostgreSQL: no server of ours running on port $PORT"
    exit 0
  fi
  say "stopping PostgreSQL on 127.0.0.1:$PORT"
  # pg_ctl also "fails" on a postmaster that was killed: stopped is stopped.
  if ! out="$(as_owner "$BIN/pg_ctl" -D "$DATA" stop -m fast -w -t 30 2>&1 9>&-)" && running; then
    printf '%s\n' "$out" >&2
    echo "PostgreSQL on 127.0.0.1:$PORT did not stop; see $LOG" >&2
    exit 1
  fi
  exit 0
fi

apt_install postgresql libpostgresql-jdbc-java
BIN="$(pg_bin)" || { echo "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin" >&2; exit 1; }

if ready; then
  say "PostgreSQL already answering on 127.0.0.1:$PORT"
else
  if [ ! -f "$DATA/PG_VERSION" ]; then
    say "creating a PostgreSQL cluster in ${BASE#$ROOT/}"
    rm -rf "$DATA"
    mkdir -p "$BASE"
    if [ "$(id -u)" = 0 ]; then chown "$OWNER": "$BASE"; fi
    as_owner env LC_ALL=C "$BIN/initdb" -D "$DATA" -U postgres --encoding=UTF8 --locale=C \
      --auth-local=trust --auth-host=scram-sha-256 --no-instructions >"$BASE/initdb.log" 2>&1 \
      || { tail -n 20 "$BASE/initdb.log" >&2; echo "initdb failed; see $BASE/initdb.log" >&2; exit 1; }
    echo "include_if_exists = 'hookbridge.conf'" | as_owner tee -a "$DATA/postgresql.conf" >/dev/null
  fi
  # Written on every start, so a moved checkout or another port still fits.
  quoted_base="${BASE//\'/\'\'}"  # a single quote doubled, for the conf file's string syntax
  as_owner tee "$DATA/hookbridge.conf" >/dev/null <<EOF
# Written by scripts/postgres.sh on every start; edits are lost.
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$quoted_base'
max_connections = 100
shared_buffers = 128MB
fsync = on
EOF
  if [ -n "${HOOKBRIDGE_PG_TLS_CERT:-}" ]; then
    owner_flags=()
    if [ "$(id -u)" = 0 ]; then owner_flags=(-o "$OWNER"); fi
    install -m 600 "${owner_flags[@]}" "$HOOKBRIDGE_PG_TLS_CERT" "$DATA/server.crt"
    install -m 600 "${owner_flags[@]}" "$HOOKBRIDGE_PG_TLS_KEY" "$DATA/server.key"
    printf "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n" \
      | as_owner tee -a "$DATA/hookbridge.conf" >/dev/null
  fi
  # Ours and still starting up, or shutting down, or killed and not yet reaped (its pid file then
  # still names a live pid): wait until it answers or is gone.
  if running; then
    say "PostgreSQL in ${BASE#$ROOT/} has a live postmaster; waiting"
    for _ in $(seq 1 300); do
      ready || ! running && break
      sleep 0.1
    done
  fi
  if ! ready; then
    running && fail_start "its postmaster is alive but does not answer"
    say "starting PostgreSQL on 127.0.0.1:$PORT (log in ${LOG#$ROOT/})"
    out="$(as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 30 start 2>&1 9>&-)" \
      || fail_start "pg_ctl start failed: $(printf '%s' "$out" | tail -n 1)"
    started_here
    for _ in $(seq 1 100); do
      ready && break
      sleep 0.1
    done
    ready || fail_start "pg_ctl started it but it does not answer"
  fi
fi

# A superuser session: over our own cluster's socket (trust), else the system clusters' socket as the
# postgres OS user (peer), else nothing (a server we cannot administer: its role/database must exist).
if [ -S "$BASE/.s.PGSQL.$PORT" ]; then
  superuser_psql() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$BASE" -p "$PORT" -U postgres -d postgres "$@"; }
elif [ -S "/var/run/postgresql/.s.PGSQL.$PORT" ]; then
  superuser_psql() { (cd / && run_as postgres "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h /var/run/postgresql -p "$PORT" -d postgres "$@"); }
else
  if PGPASSWORD="$PG_PASSWORD" "$BIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U "$PG_USER" -d "$PG_DATABASE" -c 'select 1' >/dev/null 2>&1; then
    exit 0
  fi
  echo "the server on 127.0.0.1:$PORT is not ours and $PG_USER cannot log in to $PG_DATABASE; create them there" >&2
  exit 1
fi

superuser_psql -v user="$PG_USER" -v password="$PG_PASSWORD" -v database="$PG_DATABASE" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN CREATEDB', :'user')
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user') \gexec
ALTER ROLE :"user" LOGIN CREATEDB PASSWORD :'password';
SELECT format('CREATE DATABASE %I OWNER %I', :'database', :'user')
  WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'database') \gexec
ALTER DATABASE :"database" OWNER TO :"user";
SQL

jars="$(dpkg -L libpostgresql-jdbc-java 2>/dev/null | grep '\.jar$' || true)"
jar="$(grep -m 1 '/postgresql\.jar$' <<<"$jars" || head -n 1 <<<"$jars")"
say "PostgreSQL JDBC driver: ${jar:-not found}"
