#!/usr/bin/env bash
# A local MariaDB (MySQL protocol) for the tests and for trying the bridge (installs Debian's
# mariadb-server if missing).
#   scripts/mariadb.sh [PORT] [start|stop]        default port 3306, default action start
# start: reuse a server that already answers on 127.0.0.1:PORT; otherwise create (once) and start
#        a server in .run/mariadb-PORT/ (data/, mariadb.log, unix socket), listening on 127.0.0.1
#        only. Then make sure the user and database exist: HOOKBRIDGE_MYSQL_USER /
#        HOOKBRIDGE_MYSQL_PASSWORD / HOOKBRIDGE_MYSQL_DATABASE, default hookbridge / hookbridge / mqtt.
# stop:  stop the server in .run/mariadb-PORT/; never touches a server it did not start.
# Both are idempotent. As root the server runs as the `mysql` OS user (mariadbd refuses root);
# otherwise as the current user. The administrator logs in over the unix socket only.
. "$(dirname "$0")/lib.sh"

port_and_action 3306 "$@"

MY_USER="${HOOKBRIDGE_MYSQL_USER:-hookbridge}"
MY_PASSWORD="${HOOKBRIDGE_MYSQL_PASSWORD:-hookbridge}"
MY_DATABASE="${HOOKBRIDGE_MYSQL_DATABASE:-mqtt}"

# Where the server lives: .run/mariadb-PORT, unless the `mysql` user (as root) cannot reach the
# checkout, or the unix socket path would exceed the kernel's 107 bytes; then a directory in /var/tmp.
my_base() {
  local base="$RUN_DIR/mariadb-$PORT"
  if [ $((${#base} + 12)) -gt 107 ] \
    || { [ "$(id -u)" = 0 ] && ! (cd / && run_as mysql test -x "$RUN_DIR"); }; then
    base="/var/tmp/hookbridge-mariadb-$PORT-$(printf %s "$ROOT" | md5sum | cut -c 1-8)"
  fi
  echo "$base"
}

BASE="$(my_base)"
DATA="$BASE/data"
LOG="$BASE/mariadb.log"
SOCKET="$BASE/mysqld.sock"
PIDFILE="$BASE/mariadbd.pid"
if [ -d "$DATA" ]; then
  OWNER="$(stat -c %U "$DATA")"
elif [ "$(id -u)" = 0 ]; then
  OWNER=mysql
else
  OWNER="$(id -un)"
fi

# Answers on TCP (any server, ours or not): a MySQL server speaks first (its handshake, or an
# error packet for a client it refuses), so a few bytes read back mean it is up.
ready() { [ -n "$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && head -c 4 <&3 | od -An -tx1' _ "$PORT" 2>/dev/null)" ]; }
running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }
# The administrator's session: our server's socket, as whoever the socket login was made for.
admin() { mariadb --no-defaults -S "$SOCKET" -u "$(id -un)" "$@"; }
fail_start() {
  tail -n 30 "$LOG" >&2 || true
  echo "MariaDB did not start on 127.0.0.1:$PORT ($1); see $LOG" >&2
  exit 1
}

# One invocation at a time per port (parallel test workers); the lock fd is closed for the server.
exec 9>"$RUN_DIR/mariadb-$PORT.lock"
flock 9

if [ "$ACTION" = stop ]; then
  if ! running; then
    say "MariaDB: no server of ours running on port $PORT"
    exit 0
  fi
  say "stopping MariaDB on 127.0.0.1:$PORT"
  pid="$(cat "$PIDFILE")"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || exit 0
    sleep 0.1
  done
  echo "MariaDB on 127.0.0.1:$PORT did not stop within 30 s; see $LOG" >&2
  exit 1
fi

apt_install mariadb-server mariadb-client libmariadb-java

if ready; then
  say "MariaDB already answering on 127.0.0.1:$PORT"
else
  if [ ! -d "$DATA/mysql" ]; then
    say "creating a MariaDB data directory in ${BASE#$ROOT/}"
    rm -rf "$DATA"
    mkdir -p "$DATA"
    if [ "$(id -u)" = 0 ]; then chown -R "$OWNER": "$BASE"; fi
    mariadb-install-db --no-defaults --user="$OWNER" --datadir="$DATA" \
      --auth-root-authentication-method=socket --auth-root-socket-user="$(id -un)" \
      --skip-test-db >"$BASE/install-db.log" 2>&1 \
      || { tail -n 20 "$BASE/install-db.log" >&2; echo "mariadb-install-db failed; see $BASE/install-db.log" >&2; exit 1; }
  fi
  if running; then
    say "MariaDB in ${BASE#$ROOT/} has a live server; waiting"
    for _ in $(seq 1 300); do
      ready || ! running && break
      sleep 0.1
    done
  fi
  if ! ready; then
    running && fail_start "its server is alive but does not answer"
    say "starting MariaDB on 127.0.0.1:$PORT (log in ${LOG#$ROOT/})"
    # The settings live on the command line, so a moved checkout or another port still fits.
    # max_allowed_packet: a message of broker.max_packet_size (up to 256 MB) is one row.
    (cd / && exec setsid -f mariadbd --no-defaults --user="$OWNER" --datadir="$DATA" --port="$PORT" \
      --bind-address=127.0.0.1 --socket="$SOCKET" --pid-file="$PIDFILE" --log-error="$LOG" \
      --character-set-server=utf8mb4 --collation-server=utf8mb4_bin --max-allowed-packet=512M \
      --local-infile=1 --skip-name-resolve --innodb-buffer-pool-size=128M --log-warnings=1 \
      </dev/null >/dev/null 2>&1) 9>&-
    started_here
    for _ in $(seq 1 300); do
      ready && break
      sleep 0.1
    done
    ready || fail_start "mariadbd started but does not answer"
  fi
fi

if [ ! -S "$SOCKET" ]; then
  # A server we did not start: its user and database must exist already.
  if mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$PORT" -u "$MY_USER" -p"$MY_PASSWORD" \
    -e 'SELECT 1' "$MY_DATABASE" >/dev/null 2>&1; then
    exit 0
  fi
  echo "the server on 127.0.0.1:$PORT is not ours and $MY_USER cannot log in to $MY_DATABASE; create them there" >&2
  exit 1
fi

# Names and the password go in as hex literals and are quoted by the server (QUOTE), never spliced.
hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
admin <<SQL
SET @u = CONVERT(0x$(hex "$MY_USER") USING utf8mb4), @p = CONVERT(0x$(hex "$MY_PASSWORD") USING utf8mb4),
    @d = CONCAT('\`', REPLACE(CONVERT(0x$(hex "$MY_DATABASE") USING utf8mb4), '\`', '\`\`'), '\`');
SET @s = CONCAT('CREATE USER IF NOT EXISTS ', QUOTE(@u), '@''%'' IDENTIFIED BY ', QUOTE(@p));
PREPARE s FROM @s; EXECUTE s;
SET @s = CONCAT('ALTER USER ', QUOTE(@u), '@''%'' IDENTIFIED BY ', QUOTE(@p));
PREPARE s FROM @s; EXECUTE s;
SET @s = CONCAT('CREATE DATABASE IF NOT EXISTS ', @d, ' CHARACTER SET utf8mb4 COLLATE utf8mb4_bin');
PREPARE s FROM @s; EXECUTE s;
SET @s = CONCAT('GRANT ALL ON ', @d, '.* TO ', QUOTE(@u), '@''%''');
PREPARE s FROM @s; EXECUTE s;
SQL
say "MariaDB JDBC driver: $(ls /usr/share/java/mariadb-java-client.jar 2>/dev/null || echo 'not found')"
