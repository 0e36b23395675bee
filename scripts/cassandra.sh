#!/usr/bin/env bash
# Fetch, start, wait for and stop a real single-node Apache Cassandra (no Docker, no tarball:
# the jars come from Maven Central via scripts/cassandra/pom.xml and the node runs in-process as
# org.apache.cassandra.service.CassandraDaemon with a generated cassandra.yaml).
# TrustGraph's config service keeps its configuration there.
#
#   scripts/cassandra.sh up       start (or reuse) a node and wait until it answers CQL
#   scripts/cassandra.sh down     stop the node started by this script
#   scripts/cassandra.sh status   exit 0 if a node answers CQL on the port
#   scripts/cassandra.sh fetch    only download the jars (first run only)
#
# Environment:
#   TOOLGATE_CACHE            cache root (default <repo>/.cache); files live in $TOOLGATE_CACHE/cassandra
#   CASSANDRA_PORT            CQL native transport port (default 9042)
#   CASSANDRA_STORAGE_PORT    inter-node storage port, bound on 127.0.0.1 (default 7000)
#   CASSANDRA_START_TIMEOUT   seconds to wait for CQL (default 180)
#   CASSANDRA_HEAP            max heap (default 768m)
#   CASSANDRA_JAVA            java binary (default: $JAVA_HOME/bin/java, else java on PATH); needs 17
#   CASSANDRA_DATA_DIR        keep the node's data here across restarts (default: a fresh folder per start)
#   CASSANDRA_EXTRA_JAVA_OPTS extra JVM flags appended to the defaults
#   CASSANDRA_CDS             1 (default) = use/record an AppCDS class archive in the cache; 0 = off
set -euo pipefail

CASSANDRA_VERSION=5.0.9
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib/daemon.sh
source "$SCRIPT_DIR/lib/daemon.sh"
# shellcheck source=scripts/lib/jvm.sh
source "$SCRIPT_DIR/lib/jvm.sh"
CONF_DIR="$SCRIPT_DIR/cassandra"
POM="$CONF_DIR/pom.xml"
cache_dir cassandra
LIB="$CACHE/lib"

PORT="${CASSANDRA_PORT:-9042}"
STORAGE_PORT="${CASSANDRA_STORAGE_PORT:-7000}"
START_TIMEOUT="${CASSANDRA_START_TIMEOUT:-180}"
HEAP="${CASSANDRA_HEAP:-768m}"
# one node per CQL port
daemon_files cassandra "$PORT" 9042 'org\.apache\.cassandra\.service\.CassandraDaemon'
DAEMON_WHAT="the Cassandra node"
# a failed start can leave the JVM alive (non-daemon threads)
DAEMON_FAILED='Exception encountered during startup|Fatal configuration error|Cannot start node'
# ERROR lines, and WARN lines that name an error or exception
DAEMON_ERRORS='^[0-9-]+ [0-9:,]+ (ERROR|WARN.*(ERROR|Exception))'
DAEMON_AFTER_EXIT=cds_finish

for v in PORT STORAGE_PORT START_TIMEOUT; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "CASSANDRA_$v must be a number, got '${!v}'"
done
[[ "$PORT" != "$STORAGE_PORT" ]] || die "CASSANDRA_PORT and CASSANDRA_STORAGE_PORT must differ"

# answers_cql: a CQL v4 OPTIONS frame (stream 1) must come back as a SUPPORTED frame. The node
# opens its native transport only once start-up is complete, so this is the readiness test. The
# port is connected to only once something listens there (see listening in scripts/lib/daemon.sh).
answers_cql() {
  listening "$PORT" || return 1
  local reply
  # shellcheck disable=SC2016 # $0 belongs to the inner bash
  reply="$(timeout 3 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
    printf "\x04\x00\x00\x01\x05\x00\x00\x00\x00" >&3
    head -c 5 <&3 | od -An -tx1' "$PORT" 2>/dev/null || true)"
  [[ "${reply//[[:space:]]/}" == 8400000106 ]]
}

fetch_cassandra() { fetch_jars "Cassandra $CASSANDRA_VERSION" "cassandra-all-$CASSANDRA_VERSION.jar" 'jamm-*.jar'; }

wait_until_ready() { # $1 = pid of the starting node
  wait_ready "$1" "$START_TIMEOUT" answers_cql ||
    die "Cassandra did not answer CQL after ${START_TIMEOUT}s (still running as pid $1; 'scripts/cassandra.sh down' stops it)"
}

cmd_up() {
  take_lock
  local pid
  if pid="$(our_pid)"; then
    if answers_cql; then
      log "using the Cassandra node already running (pid $pid, 127.0.0.1:$PORT)"
      return 0
    fi
    log "a node started by this script is still starting (pid $pid); waiting"
    wait_until_ready "$pid"
    return 0
  fi
  if answers_cql; then
    log "using the Cassandra node already answering CQL on 127.0.0.1:$PORT (not started by this script)"
    return 0
  fi
  local port
  for port in "$PORT" "$STORAGE_PORT"; do
    port_taken "$port" && die "port $port on 127.0.0.1 is taken by something other than a Cassandra node: a server, or a connection using it as its own end (set CASSANDRA_PORT / CASSANDRA_STORAGE_PORT, or stop it)"
  done

  fetch_cassandra
  local java
  # Cassandra 5.0 supports Java 11 and 17 only (its start-up check refuses others)
  java="$(java_bin "${CASSANDRA_JAVA:-}" "Cassandra $CASSANDRA_VERSION" 17 11)"

  local t0=$SECONDS data
  data="$(data_dir "${CASSANDRA_DATA_DIR:-}" "$PORT")"
  mkdir -p "$data"/{data,commitlog,saved_caches,hints,cdc_raw,triggers}
  sed -e "s|@DATA@|$data|g" -e "s|@PORT@|$PORT|g" -e "s|@STORAGE_PORT@|$STORAGE_PORT|g" \
    "$CONF_DIR/cassandra.yaml.in" >"$data/cassandra.yaml"
  local jamm
  jamm="$(compgen -G "$LIB/jamm-*.jar" | head -n 1)"
  # JVM flags: Cassandra's own jvm17-server.options (module access for Java 17, jamm agent),
  # plus a small heap and a quick-start JIT for a shared 2-core machine.
  local jvm=(
    -Xms256m "-Xmx$HEAP" -Xss512k -XX:MaxDirectMemorySize=256m
    -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError -XX:+HeapDumpOnOutOfMemoryError "-XX:HeapDumpPath=$data"
    -XX:TieredStopAtLevel=1 -XX:CICompilerCount=2 -XX:ActiveProcessorCount=2
    -XX:+UseThreadPriorities -XX:+PerfDisableSharedMem
    -Djava.net.preferIPv4Stack=true
    -Djdk.attach.allowAttachSelf=true
    "-javaagent:$jamm"
    --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
    --add-exports java.base/jdk.internal.ref=ALL-UNNAMED
    --add-exports java.base/sun.nio.ch=ALL-UNNAMED
    --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
    --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
    --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
    --add-exports java.sql/java.sql=ALL-UNNAMED
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
    --add-opens java.base/java.util=ALL-UNNAMED
    --add-opens java.base/java.util.concurrent=ALL-UNNAMED
    --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED
    --add-opens java.base/java.lang=ALL-UNNAMED
    --add-opens java.base/java.lang.reflect=ALL-UNNAMED
    --add-opens java.base/java.math=ALL-UNNAMED
    --add-opens java.base/java.net=ALL-UNNAMED
    "-Dcassandra.config=file://$data/cassandra.yaml"
    "-Dcassandra.storagedir=$data"
    "-Dcassandra.logdir=$CACHE"
    "-Dcassandra.triggers_dir=$data/triggers"
    "-Dlogback.configurationFile=$CONF_DIR/logback.xml"
    -Dcassandra-foreground=yes
    # single node: no gossip settling, no ring wait, no superuser delay
    -Dcassandra.skip_wait_for_gossip_to_settle=0
    -Dcassandra.ring_delay_ms=100
    -Dcassandra.superuser_setup_delay_ms=0
  )
  local f extra
  # the jamm agent is loaded too: archiving with an agent must be allowed explicitly
  while IFS= read -r f; do [[ -n "$f" ]] && jvm+=("$f"); done < <(cds_flags "${CASSANDRA_CDS:-1}" "$java" \
    -XX:+UnlockDiagnosticVMOptions -XX:+AllowArchivingWithJavaAgent)
  read -r -a extra <<<"${CASSANDRA_EXTRA_JAVA_OPTS:-}"
  jvm+=("${extra[@]}")

  log "starting Cassandra $CASSANDRA_VERSION (CQL 127.0.0.1:$PORT, storage :$STORAGE_PORT; log $LOG)"
  pid="$(start_detached "$data" java "$java" "${jvm[@]}" -cp "$LIB/*" org.apache.cassandra.service.CassandraDaemon)"

  wait_until_ready "$pid"
  log "Cassandra up in $((SECONDS - t0))s: 127.0.0.1:$PORT (pid $pid, data $data)"
}

case "${1:-}" in
  up) cmd_up ;;
  down) daemon_down "CQL :$PORT" 30 answers_cql ;;
  status) daemon_status "CQL :$PORT" answers_cql ;;
  fetch) fetch_cassandra ;;
  *) echo "usage: $0 up|down|status|fetch" >&2; exit 2 ;;
esac
