#!/usr/bin/env bash
# Fetch, start, wait for, set up and stop a real standalone Apache Pulsar broker
# (no Docker: the broker jars come from Maven Central via scripts/pulsar/pom.xml).
#
#   scripts/pulsar.sh up          start (or reuse) a broker, wait until ready, ensure namespaces
#   scripts/pulsar.sh down        stop the broker started by this script
#   scripts/pulsar.sh status      exit 0 if a broker answers ready
#   scripts/pulsar.sh ensure-ns   create tenant tg and its namespaces; compaction on tg/config (idempotent)
#   scripts/pulsar.sh fetch       only download the jars (first run only)
#
# Environment:
#   TOOLGATE_CACHE         cache root (default <repo>/.cache); files live in $TOOLGATE_CACHE/pulsar
#   PULSAR_BROKER_PORT     binary protocol port (default 6650)
#   PULSAR_WEB_PORT        HTTP admin port (default 8080)
#   PULSAR_START_TIMEOUT   seconds to wait for readiness (default 180)
#   PULSAR_JAVA            java binary (default: $JAVA_HOME/bin/java, else java on PATH); needs 17+
#   PULSAR_HEAP            max heap (default 512m)
#   PULSAR_NAMESPACES      namespaces of tenant tg that ensure-ns creates (default "tg/request tg/response tg/notify tg/config";
#                          tg/notify is where TrustGraph 2.x services listen for config pushes; tg/config holds
#                          persistent://tg/config/tool-descriptors, the compacted topic tool services announce on)
#   PULSAR_COMPACTION_THRESHOLD  compaction threshold in bytes set on tg/config (default 1048576): the broker
#                          compacts the announcements topic, keeping the latest message per service id
#   PULSAR_EXTRA_JAVA_OPTS extra JVM flags appended to the defaults
#   PULSAR_DATA_DIR        keep the broker's data here across restarts (default: a fresh folder per start)
#   PULSAR_CDS             1 (default) = use/record an AppCDS class archive in the cache; 0 = off
set -euo pipefail

PULSAR_VERSION=4.2.4
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
CONF_DIR="$SCRIPT_DIR/pulsar"
CACHE_ROOT="${TOOLGATE_CACHE:-$REPO/.cache}"
mkdir -p "$CACHE_ROOT"
CACHE_ROOT="$(cd "$CACHE_ROOT" && pwd)" # absolute: Maven resolves relative paths against the pom dir
CACHE="$CACHE_ROOT/pulsar"
mkdir -p "$CACHE"
LIB="$CACHE/lib"
STAMP="$CACHE/lib.stamp"

BROKER_PORT="${PULSAR_BROKER_PORT:-6650}"
WEB_PORT="${PULSAR_WEB_PORT:-8080}"
START_TIMEOUT="${PULSAR_START_TIMEOUT:-180}"
HEAP="${PULSAR_HEAP:-512m}"
NAMESPACES="${PULSAR_NAMESPACES:-tg/request tg/response tg/notify tg/config}"
ADMIN="http://127.0.0.1:$WEB_PORT/admin/v2"
COMPACTION_THRESHOLD="${PULSAR_COMPACTION_THRESHOLD:-1048576}"
# one broker per web port: the default port keeps the plain names
SFX=""
[[ "$WEB_PORT" == 8080 ]] || SFX="-$WEB_PORT"
PIDFILE="$CACHE/pulsar$SFX.pid"
LOG="$CACHE/pulsar$SFX.log"
LOCK="$CACHE/.lock$SFX"

log() { echo "pulsar.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v curl >/dev/null || die "curl is required"

# http_code METHOD URL [BODY] -> prints the HTTP status (000 when nothing answers); body in $HTTP_BODY_FILE
HTTP_BODY_FILE="$(mktemp)"
trap 'rm -f "$HTTP_BODY_FILE"' EXIT
http_code() {
  local method="$1" url="$2" body="${3:-}"
  local args=(-s -o "$HTTP_BODY_FILE" -w '%{http_code}' --connect-timeout 2 --max-time 10 -X "$method")
  if [[ -n "$body" ]]; then
    args+=(-H 'Content-Type: application/json' --data "$body")
  fi
  curl "${args[@]}" "$url" 2>/dev/null || true
}

# listening PORT: something listens on PORT, read from /proc/net/tcp{,6}
# without connecting. A connect to a port of the kernel's ephemeral range
# that nobody listens on can connect the socket to itself, and the port then
# stays in TIME-WAIT, where the broker cannot bind it. Without /proc, assume
# it listens (and connect, as before).
listening() {
  [[ -r /proc/net/tcp ]] || return 0
  awk -v p=":$(printf '%04X' "$1")" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

is_ready() { listening "$WEB_PORT" && [[ "$(http_code GET "$ADMIN/brokers/ready")" == 200 ]]; }

# pid of the broker started by this script, if it is still alive (and still ours)
our_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q PulsarStandaloneStarter || return 1
  echo "$pid"
}

# AppCDS: the first broker started records the classes it loaded into a dynamic archive when it
# exits gracefully ('down'); later starts map it and come up roughly twice as fast. The archive is
# keyed by JDK and jar set, recorded to a .tmp name and only kept after a clean exit. A stale or
# unusable archive is harmless: with -Xshare:auto the JVM then just starts without it.
cds_flags() { # $1 = java binary; prints JVM flags, one per line
  [[ "${PULSAR_CDS:-1}" == 1 ]] || return 0
  local key
  key="$({ readlink -f "$1"; "$1" -version 2>&1; pom_hash; } | sha256sum | cut -c1-12)"
  local archive="$CACHE/cds-$key.jsa"
  if [[ -s "$archive" ]]; then
    echo "-XX:SharedArchiveFile=$archive"
    echo "-Xshare:auto"
  else
    rm -f "$CACHE"/cds-*.jsa "$CACHE"/cds-*.jsa.tmp"$SFX"
    echo "-XX:ArchiveClassesAtExit=$archive.tmp$SFX"
  fi
}

# called after the broker exited; $1 = 1 if it exited by itself after SIGTERM, 0 if it was killed
cds_finish() {
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

pom_hash() { sha256sum "$CONF_DIR/pom.xml" | cut -d' ' -f1; }

fetch_jars() {
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(pom_hash)" && -d "$LIB" ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn (Maven 3) is required to fetch the Pulsar jars"
  exec 8>"$CACHE/.fetch.lock"
  flock 8
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(pom_hash)" && -d "$LIB" ]]; then
    exec 8>&-
    return 0 # fetched meanwhile by a concurrent call
  fi
  log "fetching Pulsar $PULSAR_VERSION jars from Maven Central (first run only)…"
  local t0=$SECONDS mvnlog="$CACHE/mvn.log"
  rm -rf "$LIB" "$STAMP"
  mkdir -p "$CACHE"
  if ! mvn -B -q -f "$CONF_DIR/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$LIB" -DincludeScope=runtime >"$mvnlog" 2>&1; then
    tail -n 40 "$mvnlog" >&2
    rm -rf "$LIB"
    die "Maven could not fetch the Pulsar jars (full log: $mvnlog)"
  fi
  ls "$LIB"/pulsar-broker-"$PULSAR_VERSION".jar >/dev/null 2>&1 || die "pulsar-broker jar missing after fetch"
  pom_hash >"$STAMP"
  exec 8>&-
  log "fetched $(find "$LIB" -name '*.jar' | wc -l) jars ($(du -sh "$LIB" | cut -f1)) in $((SECONDS - t0))s"
}

java_bin() {
  local j="${PULSAR_JAVA:-}"
  if [[ -z "$j" && -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then j="$JAVA_HOME/bin/java"; fi
  [[ -n "$j" ]] || j="$(command -v java || true)"
  [[ -n "$j" ]] || die "java (17+) is required"
  local v
  v="$("$j" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
  [[ "${v%%.*}" =~ ^[0-9]+$ && "${v%%.*}" -ge 17 ]] || die "$j is Java '$v'; Pulsar $PULSAR_VERSION needs 17+"
  echo "$j"
}

ensure_ns() {
  local t0=$SECONDS code
  # standalone creates public/default (and its cluster) only after it reports ready
  while :; do
    code="$(http_code GET "$ADMIN/namespaces/public/default")"
    [[ "$code" == 200 ]] && break
    if ((SECONDS - t0 >= 60)); then
      cat "$HTTP_BODY_FILE" >&2 || true
      die "public/default not available after 60s (last HTTP $code)"
    fi
    sleep 0.5
  done
  # list first so an already set-up broker is left untouched (a 404 GET or 409 PUT logs an ERROR
  # in the broker log)
  local existing=""
  [[ "$(http_code GET "$ADMIN/tenants")" == 200 ]] && existing="$(cat "$HTTP_BODY_FILE")"
  if [[ "$existing" != *'"tg"'* ]]; then
    code="$(http_code PUT "$ADMIN/tenants/tg" '{"adminRoles":[],"allowedClusters":["standalone"]}')"
    case "$code" in
      204 | 409) ;;
      *) cat "$HTTP_BODY_FILE" >&2; echo >&2; die "creating tenant tg: HTTP $code" ;;
    esac
  fi
  existing=""
  [[ "$(http_code GET "$ADMIN/namespaces/tg")" == 200 ]] && existing="$(cat "$HTTP_BODY_FILE")"
  local ns
  for ns in $NAMESPACES; do
    [[ "$existing" == *"\"$ns\""* ]] && continue
    code="$(http_code PUT "$ADMIN/namespaces/$ns")"
    case "$code" in
      204 | 409) ;;
      *) cat "$HTTP_BODY_FILE" >&2; echo >&2; die "creating namespace $ns: HTTP $code" ;;
    esac
  done
  if [[ " $NAMESPACES " == *" tg/config "* ]]; then
    # announcements are keyed by service id: compaction keeps the latest per key
    code="$(http_code GET "$ADMIN/namespaces/tg/config/compactionThreshold")"
    if [[ "$code" != 200 || "$(cat "$HTTP_BODY_FILE")" != "$COMPACTION_THRESHOLD" ]]; then
      code="$(http_code PUT "$ADMIN/namespaces/tg/config/compactionThreshold" "$COMPACTION_THRESHOLD")"
      case "$code" in
        204 | 200) ;;
        *) cat "$HTTP_BODY_FILE" >&2; echo >&2; die "setting the compaction threshold of tg/config: HTTP $code" ;;
      esac
    fi
  fi
  log "namespaces ready: $NAMESPACES"
}

show_log_tail() {
  local errs
  errs="$(grep ' ERROR ' "$LOG" 2>/dev/null | grep -v 'Problems reading from .*lastMark' | head -n 3 | cut -c1-400 || true)"
  if [[ -n "$errs" ]]; then
    log "first errors in $LOG:"
    echo "$errs" >&2
  fi
  log "last 40 lines of $LOG:"
  tail -n 40 "$LOG" >&2 2>/dev/null || true
}

# Wait until the broker answers ready. $1 = pid to watch (may be empty).
wait_ready() {
  local pid="$1" t0=$SECONDS next=5
  while ! is_ready; do
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      show_log_tail
      rm -f "$PIDFILE"
      cds_finish 0
      die "the Pulsar broker (pid $pid) exited during start-up"
    fi
    # a failed start does not end the JVM (non-daemon threads keep it alive): watch the log
    if [[ -n "$pid" ]] && grep -q 'Failed to start pulsar service' "$LOG" 2>/dev/null; then
      show_log_tail
      kill -KILL "$pid" 2>/dev/null || true
      rm -f "$PIDFILE"
      cds_finish 0
      die "the Pulsar broker failed to start (see $LOG)"
    fi
    if ((SECONDS - t0 >= START_TIMEOUT)); then
      show_log_tail
      die "the Pulsar broker was not ready after ${START_TIMEOUT}s (still running as pid $pid; 'scripts/pulsar.sh down' stops it)"
    fi
    if ((SECONDS - t0 >= next)); then
      log "  … waiting for the broker ($((SECONDS - t0))s)"
      next=$((next + 5))
    fi
    sleep 0.5
  done
}

# serialize up/down for one port (concurrent test runs); fd 9 is closed for the broker itself
take_lock() {
  mkdir -p "$CACHE"
  exec 9>"$LOCK"
  flock 9
}

cmd_up() {
  take_lock
  if is_ready; then
    log "using the Pulsar broker already running on 127.0.0.1:$WEB_PORT"
    ensure_ns
    return 0
  fi
  local pid
  if pid="$(our_pid)"; then
    # started earlier (maybe by a concurrent call) and still coming up
    log "a broker started by this script is still starting (pid $pid); waiting"
    wait_ready "$pid"
    ensure_ns
    return 0
  fi

  local port
  for port in "$WEB_PORT" "$BROKER_PORT"; do
    if listening "$port" && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      die "port $port on 127.0.0.1 is taken by something that is not a ready Pulsar broker (set PULSAR_WEB_PORT / PULSAR_BROKER_PORT, or stop it)"
    fi
  done

  fetch_jars
  local java
  java="$(java_bin)"

  local t0=$SECONDS
  local data
  if [[ -n "${PULSAR_DATA_DIR:-}" ]]; then
    # a kept data dir: the broker restarts with its tenants and namespaces,
    # as a production broker does
    data="$PULSAR_DATA_DIR"
  else
    # fresh data dir per run (restarting on old RocksDB metadata is unreliable)
    rm -rf "$CACHE"/data-"$WEB_PORT"-*
    data="$CACHE/data-$WEB_PORT-$(date +%Y%m%d-%H%M%S)-$$"
  fi
  mkdir -p "$data"
  sed -e "s/^brokerServicePort=.*/brokerServicePort=$BROKER_PORT/" \
      -e "s/^webServicePort=.*/webServicePort=$WEB_PORT/" \
      "$CONF_DIR/standalone.conf" >"$data/standalone.conf"
  [[ -f "$LOG" ]] && mv -f "$LOG" "$LOG.prev"
  : >"$LOG"

  local jvm=(
    -Xms256m "-Xmx$HEAP" -XX:MaxDirectMemorySize=256m
    -XX:+UseG1GC -XX:MaxGCPauseMillis=10 -XX:+ExitOnOutOfMemoryError
    -XX:TieredStopAtLevel=1
    -Djava.net.preferIPv4Stack=true
    -Dio.netty.tryReflectionSetAccessible=true
    --add-opens java.base/java.io=ALL-UNNAMED
    --add-opens java.base/java.util.zip=ALL-UNNAMED
    --add-opens java.base/java.nio=ALL-UNNAMED
    --add-opens java.base/jdk.internal.misc=ALL-UNNAMED
    --add-opens java.base/sun.net=ALL-UNNAMED
    --add-opens java.base/java.lang=ALL-UNNAMED
    --add-opens java.management/sun.management=ALL-UNNAMED
    --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
    --add-opens java.base/jdk.internal.platform=ALL-UNNAMED
    -Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver
    -Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver
    "-Dlog4j.configurationFile=$CONF_DIR/log4j2.xml"
    "-Dpulsar.log.file=$LOG"
    -Dpulsar.allocator.exit_on_oom=true
  )
  local f extra
  while IFS= read -r f; do [[ -n "$f" ]] && jvm+=("$f"); done < <(cds_flags "$java")
  read -r -a extra <<<"${PULSAR_EXTRA_JAVA_OPTS:-}" # extra JVM flags, split on whitespace
  jvm+=("${extra[@]}")
  local args=(
    --config "$data/standalone.conf"
    --no-functions-worker --no-stream-storage
    -a 127.0.0.1
    --metadata-dir "$data/metadata"
    --bookkeeper-dir "$data/bookkeeper"
  )
  rm -f "$PIDFILE"
  log "starting Pulsar $PULSAR_VERSION standalone (127.0.0.1:$BROKER_PORT, admin :$WEB_PORT; log $LOG)"
  # setsid+nohup: the broker survives this script and its terminal. bash -c writes its own pid
  # and then execs java, so the pid file holds the java pid whether or not setsid forked.
  (
    cd "$data"
    # shellcheck disable=SC2016 # $$ and $0 belong to the inner bash
    setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$PIDFILE" \
      "$java" "${jvm[@]}" -cp "$LIB/*" org.apache.pulsar.PulsarStandaloneStarter "${args[@]}" \
      >>"$LOG" 2>&1 </dev/null 8>&- 9>&- &
  )
  for _ in $(seq 1 50); do [[ -s "$PIDFILE" ]] && break; sleep 0.1; done
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [[ -n "$pid" ]] || { show_log_tail; die "could not start java"; }

  wait_ready "$pid"
  log "broker ready after $((SECONDS - t0))s (pid $pid)"
  ensure_ns
  log "Pulsar up in $((SECONDS - t0))s: pulsar://127.0.0.1:$BROKER_PORT  http://127.0.0.1:$WEB_PORT"
}

# SIGTERM, wait up to 30 s, then SIGKILL; prints 1 if it exited by itself, 0 if killed
stop_pid() {
  local pid="$1" t0=$SECONDS
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS - t0 >= 30)); then
      log "still running after 30s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      echo 0
      return 0
    fi
    sleep 0.25
  done
  echo 1
}

cmd_down() {
  take_lock
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    if is_ready; then
      log "no broker started by this script is running (a broker on :$WEB_PORT was left alone)"
    else
      log "not running"
    fi
    return 0
  fi
  log "stopping Pulsar broker (pid $pid)"
  local t0=$SECONDS clean
  clean="$(stop_pid "$pid")"
  rm -f "$PIDFILE"
  cds_finish "$clean"
  log "stopped in $((SECONDS - t0))s"
}

cmd_status() {
  if is_ready; then
    local pid
    if pid="$(our_pid)"; then log "ready (pid $pid, admin :$WEB_PORT)"; else log "ready (admin :$WEB_PORT, not started by this script)"; fi
    return 0
  fi
  if pid="$(our_pid)"; then log "starting (pid $pid), not ready yet"; else log "not running"; fi
  return 1
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  ensure-ns) ensure_ns ;;
  fetch) fetch_jars ;;
  *) echo "usage: $0 up|down|status|ensure-ns|fetch" >&2; exit 2 ;;
esac
