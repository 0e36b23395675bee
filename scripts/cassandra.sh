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
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
CONF_DIR="$SCRIPT_DIR/cassandra"
CACHE_ROOT="${TOOLGATE_CACHE:-$REPO/.cache}"
mkdir -p "$CACHE_ROOT"
CACHE_ROOT="$(cd "$CACHE_ROOT" && pwd)" # absolute: Maven resolves relative paths against the pom dir
CACHE="$CACHE_ROOT/cassandra"
mkdir -p "$CACHE"
LIB="$CACHE/lib"
STAMP="$CACHE/lib.stamp"

PORT="${CASSANDRA_PORT:-9042}"
STORAGE_PORT="${CASSANDRA_STORAGE_PORT:-7000}"
START_TIMEOUT="${CASSANDRA_START_TIMEOUT:-180}"
HEAP="${CASSANDRA_HEAP:-768m}"
# one node per CQL port: the default port keeps the plain names
SFX=""
[[ "$PORT" == 9042 ]] || SFX="-$PORT"
PIDFILE="$CACHE/cassandra$SFX.pid"
LOG="$CACHE/cassandra$SFX.log"
LOCK="$CACHE/.lock$SFX"

log() { echo "cassandra.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for v in PORT STORAGE_PORT START_TIMEOUT; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "CASSANDRA_$v must be a number, got '${!v}'"
done
[[ "$PORT" != "$STORAGE_PORT" ]] || die "CASSANDRA_PORT and CASSANDRA_STORAGE_PORT must differ"

# answers_cql: a CQL v4 OPTIONS frame (stream 1) must come back as a SUPPORTED frame. The node
# opens its native transport only once start-up is complete, so this is the readiness test.
answers_cql() {
  local reply
  reply="$(timeout 3 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
    printf "\x04\x00\x00\x01\x05\x00\x00\x00\x00" >&3
    head -c 5 <&3 | od -An -tx1' "$PORT" 2>/dev/null || true)"
  [[ "$(echo $reply)" == "84 00 00 01 06" ]]
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pid of the node started by this script, if it is still alive (and still ours)
our_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'org.apache.cassandra.service.CassandraDaemon' || return 1
  echo "$pid"
}

pom_hash() { sha256sum "$CONF_DIR/pom.xml" | cut -d' ' -f1; }

fetch_jars() {
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(pom_hash)" && -d "$LIB" ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn (Maven 3) is required to fetch the Cassandra jars"
  exec 8>"$CACHE/.fetch.lock"
  flock 8
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(pom_hash)" && -d "$LIB" ]]; then
    exec 8>&-
    return 0 # fetched meanwhile by a concurrent call
  fi
  log "fetching Cassandra $CASSANDRA_VERSION jars from Maven Central (first run only)…"
  local t0=$SECONDS mvnlog="$CACHE/mvn.log"
  rm -rf "$LIB" "$STAMP"
  if ! mvn -B -q -f "$CONF_DIR/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$LIB" -DincludeScope=runtime >"$mvnlog" 2>&1; then
    tail -n 40 "$mvnlog" >&2
    rm -rf "$LIB"
    die "Maven could not fetch the Cassandra jars (full log: $mvnlog)"
  fi
  ls "$LIB"/cassandra-all-"$CASSANDRA_VERSION".jar >/dev/null 2>&1 || die "cassandra-all jar missing after fetch"
  ls "$LIB"/jamm-*.jar >/dev/null 2>&1 || die "jamm jar missing after fetch"
  pom_hash >"$STAMP"
  exec 8>&-
  log "fetched $(find "$LIB" -name '*.jar' | wc -l) jars ($(du -sh "$LIB" | cut -f1)) in $((SECONDS - t0))s"
}

java_bin() {
  local j="${CASSANDRA_JAVA:-}"
  if [[ -z "$j" && -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then j="$JAVA_HOME/bin/java"; fi
  [[ -n "$j" ]] || j="$(command -v java || true)"
  [[ -n "$j" ]] || die "java 17 is required"
  local v
  v="$("$j" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
  # Cassandra 5.0 supports Java 11 and 17 only (its start-up check refuses others)
  [[ "$v" == 17 || "$v" == 11 ]] || die "$j is Java '$v'; Cassandra $CASSANDRA_VERSION needs 17 (or 11)"
  echo "$j"
}

# AppCDS, as scripts/pulsar.sh does: the first node started records the classes it loaded when it
# exits gracefully ('down'); later starts map the archive and come up faster.
cds_flags() { # $1 = java binary
  [[ "${CASSANDRA_CDS:-1}" == 1 ]] || return 0
  local key
  key="$({ readlink -f "$1"; "$1" -version 2>&1; pom_hash; } | sha256sum | cut -c1-12)"
  local archive="$CACHE/cds-$key.jsa"
  # the jamm agent is loaded too: archiving with an agent must be allowed explicitly
  echo "-XX:+UnlockDiagnosticVMOptions"
  echo "-XX:+AllowArchivingWithJavaAgent"
  if [[ -s "$archive" ]]; then
    echo "-XX:SharedArchiveFile=$archive"
    echo "-Xshare:auto"
  else
    rm -f "$CACHE"/cds-*.jsa "$CACHE"/cds-*.jsa.tmp"$SFX"
    echo "-XX:ArchiveClassesAtExit=$archive.tmp$SFX"
  fi
}

cds_finish() { # $1 = 1 if the node exited by itself after SIGTERM, 0 if it was killed
  local tmp
  for tmp in "$CACHE"/cds-*.jsa.tmp"$SFX"; do
    [[ -e "$tmp" ]] || continue
    local final="${tmp%.tmp"$SFX"}"
    if [[ "$1" == 1 && -s "$tmp" ]]; then
      mv -f "$tmp" "$final" && log "recorded a class-data archive for faster starts ($(du -h "$final" | cut -f1))"
    else
      rm -f "$tmp"
    fi
  done
}

show_log_tail() {
  local errs
  errs="$(grep -E '^[0-9-]+ [0-9:,]+ (ERROR|WARN)' "$LOG" 2>/dev/null | grep -E 'ERROR|Exception' | head -n 3 | cut -c1-400 || true)"
  if [[ -n "$errs" ]]; then
    log "first errors in $LOG:"
    echo "$errs" >&2
  fi
  log "last 40 lines of $LOG:"
  tail -n 40 "$LOG" >&2 2>/dev/null || true
}

wait_ready() { # $1 = pid to watch
  local pid="$1" t0=$SECONDS next=10
  while ! answers_cql; do
    if ! kill -0 "$pid" 2>/dev/null; then
      show_log_tail
      rm -f "$PIDFILE"
      cds_finish 0
      die "the Cassandra node (pid $pid) exited during start-up"
    fi
    # a failed start can leave the JVM alive (non-daemon threads): watch the log too
    if grep -qE 'Exception encountered during startup|Fatal configuration error|Cannot start node' "$LOG" 2>/dev/null; then
      show_log_tail
      kill -KILL "$pid" 2>/dev/null || true
      rm -f "$PIDFILE"
      cds_finish 0
      die "the Cassandra node failed to start (see $LOG)"
    fi
    if ((SECONDS - t0 >= START_TIMEOUT)); then
      show_log_tail
      die "Cassandra did not answer CQL after ${START_TIMEOUT}s (still running as pid $pid; 'scripts/cassandra.sh down' stops it)"
    fi
    if ((SECONDS - t0 >= next)); then
      log "  … waiting for the node ($((SECONDS - t0))s)"
      next=$((next + 10))
    fi
    sleep 0.5
  done
}

take_lock() {
  exec 9>"$LOCK"
  flock 9
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
    wait_ready "$pid"
    return 0
  fi
  if answers_cql; then
    log "using the Cassandra node already answering CQL on 127.0.0.1:$PORT (not started by this script)"
    return 0
  fi
  local port
  for port in "$PORT" "$STORAGE_PORT"; do
    port_taken "$port" && die "port $port on 127.0.0.1 is taken by something that is not a Cassandra node (set CASSANDRA_PORT / CASSANDRA_STORAGE_PORT, or stop it)"
  done

  fetch_jars
  local java
  java="$(java_bin)"

  local t0=$SECONDS data
  if [[ -n "${CASSANDRA_DATA_DIR:-}" ]]; then
    data="$(mkdir -p "$CASSANDRA_DATA_DIR" && cd "$CASSANDRA_DATA_DIR" && pwd)"
  else
    rm -rf "$CACHE"/data-"$PORT"-*
    data="$CACHE/data-$PORT-$(date +%Y%m%d-%H%M%S)-$$"
  fi
  mkdir -p "$data"/{data,commitlog,saved_caches,hints,cdc_raw,triggers}
  sed -e "s|@DATA@|$data|g" -e "s|@PORT@|$PORT|g" -e "s|@STORAGE_PORT@|$STORAGE_PORT|g" \
    "$CONF_DIR/cassandra.yaml.in" >"$data/cassandra.yaml"
  [[ -f "$LOG" ]] && mv -f "$LOG" "$LOG.prev"
  : >"$LOG"

  local jamm
  jamm="$(ls "$LIB"/jamm-*.jar | head -n 1)"
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
  while IFS= read -r f; do [[ -n "$f" ]] && jvm+=("$f"); done < <(cds_flags "$java")
  read -r -a extra <<<"${CASSANDRA_EXTRA_JAVA_OPTS:-}"
  jvm+=("${extra[@]}")

  rm -f "$PIDFILE"
  log "starting Cassandra $CASSANDRA_VERSION (CQL 127.0.0.1:$PORT, storage :$STORAGE_PORT; log $LOG)"
  # setsid+nohup: the node survives this script; bash -c writes its own pid, then execs java
  (
    cd "$data"
    # shellcheck disable=SC2016 # $$ and $0 belong to the inner bash
    setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$PIDFILE" \
      "$java" "${jvm[@]}" -cp "$LIB/*" org.apache.cassandra.service.CassandraDaemon \
      >>"$LOG" 2>&1 </dev/null 8>&- 9>&- &
  )
  for _ in $(seq 1 50); do [[ -s "$PIDFILE" ]] && break; sleep 0.1; done
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [[ -n "$pid" ]] || { show_log_tail; die "could not start java"; }

  wait_ready "$pid"
  log "Cassandra up in $((SECONDS - t0))s: 127.0.0.1:$PORT (pid $pid, data $data)"
}

cmd_down() {
  take_lock
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    if answers_cql; then
      log "no node started by this script is running (a node on :$PORT was left alone)"
    else
      log "not running"
    fi
    return 0
  fi
  log "stopping Cassandra (pid $pid)"
  local t0=$SECONDS clean=1
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS - t0 >= 30)); then
      log "still running after 30s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      clean=0
      sleep 0.5
      break
    fi
    sleep 0.25
  done
  rm -f "$PIDFILE"
  cds_finish "$clean"
  log "stopped in $((SECONDS - t0))s"
}

cmd_status() {
  local pid
  if answers_cql; then
    if pid="$(our_pid)"; then log "ready (pid $pid, CQL :$PORT)"; else log "ready (CQL :$PORT, not started by this script)"; fi
    return 0
  fi
  if pid="$(our_pid)"; then log "starting (pid $pid), not answering CQL yet"; else log "not running"; fi
  return 1
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  fetch) fetch_jars ;;
  *) echo "usage: $0 up|down|status|fetch" >&2; exit 2 ;;
esac
