#!/usr/bin/env bash
# A local single-node Cassandra 5.0 for the tests and for trying the bridge.
#   scripts/cassandra.sh [PORT] [start|stop]        default CQL port 9042, default action start
# start: reuse a node that already answers CQL on 127.0.0.1:PORT; otherwise install the server (once,
#        shared by all ports) and start a node detached, everything under .run/cassandra-PORT/ (conf/,
#        data/, commitlog/, logs/system.log, cassandra.pid, tls/); wait until CQL answers and the login
#        role HOOKBRIDGE_CASSA_USER / HOOKBRIDGE_CASSA_PASSWORD (default hookbridge / hookbridge) exists.
# stop:  stop the node recorded in .run/cassandra-PORT/ (SIGTERM: Cassandra drains, flushing memtables
#        and the commit log; SIGKILL after 60 s); never touches a node it did not start. Data is kept.
# Both are idempotent; one invocation at a time per port.
#
# The server: Maven Central no longer carries Cassandra's binary tarball (its last one there is
# 4.0-alpha2), but it carries the server jar `org.apache.cassandra:cassandra-all` of every release.
# scripts/cassandra/pom.xml names it; Maven copies it and its runtime dependencies to
# .run/cassandra/<version>/lib/, and this script supplies what the tarball's bin/ and conf/ would have:
# the JVM flags Java 17 needs, a cassandra.yaml and a logback.xml.
#
# Sized for a 2-core machine running the test suite beside it: 1 GB heap, small caches, one token.
# Ports come from the CQL port so that two nodes can coexist: storage PORT+10000, JMX (local) PORT+20000.
# Authentication is on (PasswordAuthenticator; the default superuser cassandra/cassandra creates the
# login role). TLS is offered on the CQL port next to plain connections (client_encryption_options
# optional: true), with a private CA made once in tls/ (tls/ca.pem verifies the node as 127.0.0.1).
# Durability is Cassandra's default (periodic commit log sync every 10 s); `stop` drains, so a stop and
# start loses nothing that was acknowledged.
. "$(dirname "$0")/lib.sh"

port_and_action 9042 "$@"

VERSION="5.0.9"
SRC="$ROOT/scripts/cassandra"
LIB="$RUN_DIR/cassandra/$VERSION/lib"
BASE="$RUN_DIR/cassandra-$PORT"
PIDFILE="$BASE/cassandra.pid"
LOG="$BASE/logs/system.log"
STORAGE_PORT=$((PORT + 10000))
JMX_PORT=$((PORT + 20000))

exec 9>"$RUN_DIR/cassandra-$PORT.lock"
flock 9

# The pid in our pid file, if that process is alive and is our node.
our_pid() {
  local pid
  [ -f "$PIDFILE" ] && pid="$(cat "$PIDFILE" 2>/dev/null)" && [ -n "$pid" ] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-Dhookbridge.node=$BASE " || return 1
  echo "$pid"
}

if [ "$ACTION" = stop ]; then
  if ! pid="$(our_pid)"; then
    say "Cassandra: no node of ours running on port $PORT"
    exit 0
  fi
  say "stopping Cassandra on 127.0.0.1:$PORT (pid $pid)"
  kill -TERM "$pid"
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; exit 0; }
    sleep 0.1
  done
  say "Cassandra did not stop in 60 s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
  exit 0
fi

# The CQL check needs cassandra-driver: the project's virtualenv (made here if it has none).
if ! "$VENV/bin/python" -c 'import cassandra' 2>/dev/null; then
  python_env
fi
ready() { "$VENV/bin/python" "$SRC/ready.py" "$PORT" "$@" 2>/dev/null; }

if ready; then
  say "Cassandra already answering on 127.0.0.1:$PORT"
  exit 0
fi

install_server() {
  [ -f "$LIB/.complete" ] && return 0
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  command -v mvn >/dev/null || apt_install maven
  exec 8>"$RUN_DIR/cassandra-install.lock"
  flock 8
  [ -f "$LIB/.complete" ] && return 0
  say "installing Cassandra $VERSION from Maven Central into ${LIB#$ROOT/}"
  rm -rf "$LIB"
  mkdir -p "$RUN_DIR/cassandra"
  mvn -q -B -f "$SRC/pom.xml" -Dcassandra.version="$VERSION" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIB" >"$RUN_DIR/cassandra/install.log" 2>&1 \
    || { tail -n 20 "$RUN_DIR/cassandra/install.log" >&2; echo "Maven could not fetch Cassandra" >&2; exit 1; }
  touch "$LIB/.complete"
}

# A private CA and a certificate for 127.0.0.1, made once per node directory.
make_tls() {
  local dir="$BASE/tls"
  [ -f "$dir/node.pem" ] && return 0
  command -v openssl >/dev/null || apt_install openssl
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=hookbridge test CA" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$dir/node.key" -out "$dir/node.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$dir/san.ext"
  openssl x509 -req -in "$dir/node.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 3650 \
    -extfile "$dir/san.ext" -out "$dir/node.crt" 2>/dev/null
  # PEMBasedSslContextFactory reads the unencrypted PKCS#8 key and the chain from one file.
  { openssl pkcs8 -topk8 -nocrypt -in "$dir/node.key"; cat "$dir/node.crt"; } >"$dir/node.pem"
}

write_conf() {
  mkdir -p "$BASE/conf" "$BASE/logs"
  cp "$SRC/logback.xml" "$BASE/conf/logback.xml"
  # Written on every start, so a moved checkout or another port still fits.
  cat >"$BASE/conf/cassandra.yaml" <<EOF
# Written by scripts/cassandra.sh on every start; edits are lost.
cluster_name: hookbridge-test-$PORT
num_tokens: 1
initial_token: 0
auto_bootstrap: false
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$STORAGE_PORT"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: $STORAGE_PORT
native_transport_port: $PORT
start_native_transport: true
data_file_directories: ["$BASE/data"]
commitlog_directory: $BASE/commitlog
saved_caches_directory: $BASE/saved_caches
hints_directory: $BASE/hints
cdc_raw_directory: $BASE/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
authenticator: PasswordAuthenticator
authorizer: AllowAllAuthorizer
role_manager: CassandraRoleManager
# small caches and pools: a test node on a 2-core machine shared with the test suite
key_cache_size: 16MiB
file_cache_size: 64MiB
concurrent_compactors: 1
concurrent_reads: 8
concurrent_writes: 16
memtable_heap_space: 256MiB
memtable_offheap_space: 128MiB
# the tests page through 10,000 rows and drop tables between tests; snapshots there only fill the disk
auto_snapshot: false
snapshot_on_duplicate_row_detection: false
client_encryption_options:
  enabled: true
  optional: true
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: $BASE/tls/node.pem
  require_client_auth: false
EOF
}

start_node() {
  local java flags
  java="$(command -v java)"
  flags=(
    -Dhookbridge.node="$BASE"
    -Xms1G -Xmx1G -Xss256k -XX:MaxDirectMemorySize=512M
    -XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxTenuringThreshold=1
    -XX:+HeapDumpOnOutOfMemoryError -XX:HeapDumpPath="$BASE/logs" -XX:+CrashOnOutOfMemoryError
    -Djava.net.preferIPv4Stack=true
    -Dcassandra.config="file://$BASE/conf/cassandra.yaml"
    -Dlogback.configurationFile="$BASE/conf/logback.xml"
    -Dcassandra.logdir="$BASE/logs"
    -Dcassandra.storagedir="$BASE"
    -Dcassandra.jmx.local.port="$JMX_PORT"
    -Dcassandra.skip_wait_for_gossip_to_settle=0
    -Dcassandra.superuser_setup_delay_ms=0
    -Dcassandra.initial_token=0
    -Dio.netty.tryReflectionSetAccessible=true
    -Djdk.attach.allowAttachSelf=true
    -javaagent:"$(ls "$LIB"/jamm-*.jar | head -n 1)"
    # Java 17 module access Cassandra needs (the tarball's conf/jvm17-server.options)
    --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
    --add-exports java.base/jdk.internal.ref=ALL-UNNAMED
    --add-exports java.base/sun.nio.ch=ALL-UNNAMED
    --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
    --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
    --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
    --add-exports java.sql/java.sql=ALL-UNNAMED
    --add-exports java.base/java.lang.ref=ALL-UNNAMED
    --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
    --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
    --add-opens java.base/java.lang.module=ALL-UNNAMED
    --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
    --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
    --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
    --add-opens java.base/jdk.internal.math=ALL-UNNAMED
    --add-opens java.base/jdk.internal.module=ALL-UNNAMED
    --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
    --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
    --add-opens java.base/sun.nio.ch=ALL-UNNAMED
    --add-opens java.base/java.io=ALL-UNNAMED
    --add-opens java.base/java.nio=ALL-UNNAMED
    --add-opens java.base/java.lang.reflect=ALL-UNNAMED
    --add-opens java.base/java.lang=ALL-UNNAMED
    --add-opens java.base/java.util=ALL-UNNAMED
    --add-opens java.base/java.util.concurrent=ALL-UNNAMED
    --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED
    --add-opens java.base/java.net=ALL-UNNAMED
    -cp "$BASE/conf:$LIB/*"
    org.apache.cassandra.service.CassandraDaemon
  )
  say "starting Cassandra $VERSION on 127.0.0.1:$PORT (log in ${LOG#$ROOT/})"
  # setsid: its own session, so a test run's Ctrl-C or process group kill leaves it alone;
  # the lock fd is closed for it.
  setsid "$java" "${flags[@]}" </dev/null >"$BASE/logs/stdout.log" 2>&1 9>&- &
  echo $! >"$PIDFILE"
}

if pid="$(our_pid)"; then
  say "Cassandra in ${BASE#$ROOT/} is starting (pid $pid); waiting"
else
  install_server
  make_tls
  write_conf
  mkdir -p "$BASE/data" "$BASE/commitlog" "$BASE/saved_caches" "$BASE/hints" "$BASE/cdc_raw"
  start_node
  started_here
fi
started=$SECONDS
attempts=1
while ! ready --setup; do
  if ! our_pid >/dev/null; then
    tail -n 30 "$LOG" "$BASE/logs/stdout.log" >&2 2>/dev/null || true
    if [ "$attempts" -lt 2 ]; then
      # Right after a stop, a port of the last node (JMX, storage) can still be held for a moment.
      say "Cassandra exited while starting on 127.0.0.1:$PORT; starting it once more in 5 s"
      attempts=$((attempts + 1))
      sleep 5
      start_node
      continue
    fi
    echo "Cassandra exited while starting on 127.0.0.1:$PORT; see $LOG" >&2
    exit 1
  fi
  if [ $((SECONDS - started)) -gt 240 ]; then
    echo "Cassandra did not answer CQL on 127.0.0.1:$PORT within 240 s; see $LOG" >&2
    exit 1
  fi
  sleep 1
done
ready || { echo "Cassandra answers on 127.0.0.1:$PORT but the login role does not work" >&2; exit 1; }
say "Cassandra answering on 127.0.0.1:$PORT after $((SECONDS - started)) s"
