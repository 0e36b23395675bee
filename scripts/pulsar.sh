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
#                          persistent://tg/config/tool-descriptors, the compacted topic tool services announce on;
#                          tg/operations holds persistent://tg/operations/state, the compacted table of durable
#                          operations (docs/operations.md), with compaction and a retention of 2 days)
#   PULSAR_COMPACTION_THRESHOLD  compaction threshold in bytes set on tg/config (default 1048576): the broker
#                          compacts the announcements topic, keeping the latest message per service id
#   PULSAR_ANNOUNCE_MAX_BYTES  the broker's largest message on persistent://tg/config/tool-descriptors (default
#                          1114112: the gateway's 1 MiB bound on an announcement, plus room for the message's
#                          metadata): larger ones are refused by the broker, so a flood of them never reaches,
#                          nor holds up, the gateways reading the topic (a topic policy: topic-level policies
#                          are on in scripts/pulsar/standalone.conf)
#   PULSAR_EXTRA_JAVA_OPTS extra JVM flags appended to the defaults
#   PULSAR_DATA_DIR        keep the broker's data here across restarts (default: a fresh folder per start)
#   PULSAR_CDS             1 (default) = use/record an AppCDS class archive in the cache; 0 = off
#   PULSAR_AUTH            "token": token authentication (AuthenticationProviderToken, HS256) and authorization
#                          on; clients without a valid token are refused, roles other than the superuser "admin"
#                          may do only what they are granted. Default: off (no authentication)
#   PULSAR_AUTH_DIR        with PULSAR_AUTH=token: where the broker's secret key (secret.key) and the superuser's
#                          token (admin.token) are made, by the broker's own TokensCliUtils, unless there already;
#                          sign role tokens with secret.key (HS256, the role in "sub"). Default $TOOLGATE_CACHE/pulsar/auth-<web port>
#   PULSAR_TLS_PORT        also serve the binary protocol over TLS on this port (pulsar+ssl://), with
#   PULSAR_TLS_CERT        the broker's certificate (PEM; its chain, if any, after it) and
#   PULSAR_TLS_KEY         its private key (PEM, PKCS#8: "BEGIN PRIVATE KEY")
set -euo pipefail

PULSAR_VERSION=4.2.4
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib/daemon.sh
source "$SCRIPT_DIR/lib/daemon.sh"
# shellcheck source=scripts/lib/jvm.sh
source "$SCRIPT_DIR/lib/jvm.sh"
CONF_DIR="$SCRIPT_DIR/pulsar"
POM="$CONF_DIR/pom.xml"
cache_dir pulsar
LIB="$CACHE/lib"

BROKER_PORT="${PULSAR_BROKER_PORT:-6650}"
WEB_PORT="${PULSAR_WEB_PORT:-8080}"
START_TIMEOUT="${PULSAR_START_TIMEOUT:-180}"
HEAP="${PULSAR_HEAP:-512m}"
NAMESPACES="${PULSAR_NAMESPACES:-tg/request tg/response tg/notify tg/config tg/operations}"
ADMIN="http://127.0.0.1:$WEB_PORT/admin/v2"
COMPACTION_THRESHOLD="${PULSAR_COMPACTION_THRESHOLD:-1048576}"
ANNOUNCE_MAX_BYTES="${PULSAR_ANNOUNCE_MAX_BYTES:-1114112}"
AUTH="${PULSAR_AUTH:-}"
case "$AUTH" in
  "" | token) ;;
  *) echo "pulsar.sh: PULSAR_AUTH=$AUTH: want token, or leave it unset" >&2; exit 2 ;;
esac
TLS_PORT="${PULSAR_TLS_PORT:-}"
if [[ -n "$TLS_PORT" ]]; then
  [[ -r "${PULSAR_TLS_CERT:-}" && -r "${PULSAR_TLS_KEY:-}" ]] || {
    echo "pulsar.sh: PULSAR_TLS_PORT needs PULSAR_TLS_CERT and PULSAR_TLS_KEY, readable PEM files" >&2
    exit 2
  }
  grep -q 'BEGIN PRIVATE KEY' "$PULSAR_TLS_KEY" || {
    echo "pulsar.sh: PULSAR_TLS_KEY $PULSAR_TLS_KEY: the broker reads PKCS#8 keys (BEGIN PRIVATE KEY); convert with openssl pkcs8 -topk8 -nocrypt" >&2
    exit 2
  }
fi
AUTH_DIR=""
if [[ "$AUTH" == token ]]; then
  AUTH_DIR="${PULSAR_AUTH_DIR:-$CACHE/auth-$WEB_PORT}"
fi
# one broker per web port
daemon_files pulsar "$WEB_PORT" 8080 PulsarStandaloneStarter
DAEMON_WHAT="the Pulsar broker"
# a failed start does not end the JVM (non-daemon threads keep it alive)
DAEMON_FAILED='Failed to start pulsar service'
DAEMON_ERRORS=' ERROR '
DAEMON_NOISE='Problems reading from .*lastMark'
DAEMON_AFTER_EXIT=cds_finish

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
  if [[ -n "$AUTH_DIR" && -s "$AUTH_DIR/admin.token" ]]; then
    args+=(-H "Authorization: Bearer $(<"$AUTH_DIR/admin.token")")
  fi
  curl "${args[@]}" "$url" 2>/dev/null || true
}

# the admin port is polled only once something listens there (see listening in scripts/lib/daemon.sh)
is_ready() { listening "$WEB_PORT" && [[ "$(http_code GET "$ADMIN/brokers/ready")" == 200 ]]; }

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
  if [[ " $NAMESPACES " == *" tg/config "* ]]; then
    # the announcements topic refuses messages larger than an announcement
    # may be: the broker keeps a flood of large ones out of the topic
    local topic="$ADMIN/persistent/tg/config/tool-descriptors"
    code="$(http_code PUT "$topic")"
    case "$code" in
      204 | 409) ;;
      *) cat "$HTTP_BODY_FILE" >&2; echo >&2; die "creating persistent://tg/config/tool-descriptors: HTTP $code" ;;
    esac
    code="$(http_code POST "$topic/maxMessageSize" "$ANNOUNCE_MAX_BYTES")"
    case "$code" in
      204 | 200) ;;
      405) log "warning: the broker has topic-level policies off (a broker started with another configuration?):" \
        "persistent://tg/config/tool-descriptors has no maximum message size" ;;
      *) cat "$HTTP_BODY_FILE" >&2; echo >&2; die "setting the maximum message size of persistent://tg/config/tool-descriptors: HTTP $code" ;;
    esac
  fi
  if [[ " $NAMESPACES " == *" tg/operations "* ]]; then
    # operation state is keyed by operation id: compaction keeps the latest
    # per key; retention keeps it while no reader is attached (>= the TTL)
    code="$(http_code PUT "$ADMIN/namespaces/tg/operations/compactionThreshold" "$COMPACTION_THRESHOLD")"
    case "$code" in
      204 | 200) ;;
      *) cat "$HTTP_BODY_FILE" >&2; echo >&2; die "setting the compaction threshold of tg/operations: HTTP $code" ;;
    esac
    code="$(http_code POST "$ADMIN/namespaces/tg/operations/retention" '{"retentionTimeInMinutes": 2880, "retentionSizeInMB": -1}')"
    case "$code" in
      204 | 200) ;;
      *) cat "$HTTP_BODY_FILE" >&2; echo >&2; die "setting the retention of tg/operations: HTTP $code" ;;
    esac
  fi
  log "namespaces ready: $NAMESPACES"
}

fetch_pulsar() { fetch_jars "Pulsar $PULSAR_VERSION" "pulsar-broker-$PULSAR_VERSION.jar"; }

# make_auth JAVA: the secret key and the superuser's token in $AUTH_DIR,
# made by the broker's own token tool unless they exist (tokens signed
# earlier stay valid across restarts).
make_auth() {
  local java="$1" tokens=org.apache.pulsar.utils.auth.tokens.TokensCliUtils
  mkdir -p "$AUTH_DIR"
  chmod 700 "$AUTH_DIR"
  AUTH_DIR="$(cd "$AUTH_DIR" && pwd)"
  if [[ ! -s "$AUTH_DIR/secret.key" ]]; then
    "$java" -cp "$LIB/*" "$tokens" create-secret-key --output "$AUTH_DIR/secret.key" >/dev/null ||
      die "making the broker's secret key in $AUTH_DIR failed"
    rm -f "$AUTH_DIR/admin.token"
  fi
  if [[ ! -s "$AUTH_DIR/admin.token" ]]; then
    "$java" -cp "$LIB/*" "$tokens" create --secret-key "file://$AUTH_DIR/secret.key" --subject admin >"$AUTH_DIR/admin.token.tmp" ||
      die "making the superuser's token in $AUTH_DIR failed"
    mv "$AUTH_DIR/admin.token.tmp" "$AUTH_DIR/admin.token"
  fi
  chmod 600 "$AUTH_DIR/secret.key" "$AUTH_DIR/admin.token"
  log "token authentication and authorization on: secret key and superuser token (role admin) in $AUTH_DIR"
}

wait_until_ready() { # $1 = pid of the starting broker
  wait_ready "$1" "$START_TIMEOUT" is_ready ||
    die "the Pulsar broker was not ready after ${START_TIMEOUT}s (still running as pid $1; 'scripts/pulsar.sh down' stops it)"
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
    wait_until_ready "$pid"
    ensure_ns
    return 0
  fi

  local port
  for port in "$WEB_PORT" "$BROKER_PORT" $TLS_PORT; do
    if port_taken "$port"; then
      die "port $port on 127.0.0.1 is taken by something other than a ready Pulsar broker: a server, or a connection using it as its own end (set PULSAR_WEB_PORT / PULSAR_BROKER_PORT, or stop it)"
    fi
  done

  fetch_pulsar
  local java
  java="$(java_bin "${PULSAR_JAVA:-}" "Pulsar $PULSAR_VERSION" 17+)"

  local t0=$SECONDS
  # a kept data dir (PULSAR_DATA_DIR): the broker restarts with its tenants
  # and namespaces, as a production broker does; else a fresh one per start
  local data
  data="$(data_dir "${PULSAR_DATA_DIR:-}" "$WEB_PORT")"
  sed -e "s/^brokerServicePort=.*/brokerServicePort=$BROKER_PORT/" \
      -e "s/^webServicePort=.*/webServicePort=$WEB_PORT/" \
      "$CONF_DIR/standalone.conf" >"$data/standalone.conf"
  if [[ "$AUTH" == token ]]; then
    make_auth "$java"
    sed -i -e "s/^authenticationEnabled=.*/authenticationEnabled=true/" \
        -e "s/^authorizationEnabled=.*/authorizationEnabled=true/" "$data/standalone.conf"
    cat >>"$data/standalone.conf" <<CONF
# PULSAR_AUTH=token (scripts/pulsar.sh)
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken
tokenSecretKey=file://$AUTH_DIR/secret.key
superUserRoles=admin
brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
brokerClientAuthenticationParameters=file://$AUTH_DIR/admin.token
CONF
  fi
  if [[ -n "$TLS_PORT" ]]; then
    cat >>"$data/standalone.conf" <<CONF
# PULSAR_TLS_PORT (scripts/pulsar.sh)
brokerServicePortTls=$TLS_PORT
tlsCertificateFilePath=$(cd "$(dirname "$PULSAR_TLS_CERT")" && pwd)/$(basename "$PULSAR_TLS_CERT")
tlsKeyFilePath=$(cd "$(dirname "$PULSAR_TLS_KEY")" && pwd)/$(basename "$PULSAR_TLS_KEY")
CONF
    log "TLS on pulsar+ssl://127.0.0.1:$TLS_PORT"
  fi
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
  while IFS= read -r f; do [[ -n "$f" ]] && jvm+=("$f"); done < <(cds_flags "${PULSAR_CDS:-1}" "$java")
  read -r -a extra <<<"${PULSAR_EXTRA_JAVA_OPTS:-}" # extra JVM flags, split on whitespace
  jvm+=("${extra[@]}")
  local args=(
    --config "$data/standalone.conf"
    --no-functions-worker --no-stream-storage
    -a 127.0.0.1
    --metadata-dir "$data/metadata"
    --bookkeeper-dir "$data/bookkeeper"
  )
  log "starting Pulsar $PULSAR_VERSION standalone (127.0.0.1:$BROKER_PORT, admin :$WEB_PORT; log $LOG)"
  pid="$(start_detached "$data" java "$java" "${jvm[@]}" -cp "$LIB/*" org.apache.pulsar.PulsarStandaloneStarter "${args[@]}")"

  wait_until_ready "$pid"
  log "broker ready after $((SECONDS - t0))s (pid $pid)"
  ensure_ns
  log "Pulsar up in $((SECONDS - t0))s: pulsar://127.0.0.1:$BROKER_PORT  http://127.0.0.1:$WEB_PORT"
}

case "${1:-}" in
  up) cmd_up ;;
  down) daemon_down "admin :$WEB_PORT" 30 is_ready ;;
  status) daemon_status "admin :$WEB_PORT" is_ready ;;
  ensure-ns) ensure_ns ;;
  fetch) fetch_pulsar ;;
  *) echo "usage: $0 up|down|status|ensure-ns|fetch" >&2; exit 2 ;;
esac
