#!/usr/bin/env bash
# Start, wait for and stop TrustGraph's real config service (`config-svc` of trustgraph-flow,
# installed into the project venv by scripts/pyenv.sh), backed by the Cassandra node of
# scripts/cassandra.sh and speaking over the Pulsar broker of scripts/pulsar.sh.
# The protocol it speaks is written down in docs/trustgraph-config.md.
#
#   scripts/configsvc.sh up       start (or reuse) config-svc; wait until it answers a config
#                                 request; register the workspaces of CONFIGSVC_WORKSPACES
#   scripts/configsvc.sh down     stop the config-svc started by this script
#   scripts/configsvc.sh status   exit 0 if a config service answers on the broker
#
# Needs a running broker (scripts/pulsar.sh up) and Cassandra (scripts/cassandra.sh up).
#
# Environment:
#   TOOLGATE_CACHE           cache root (default <repo>/.cache); files live in $TOOLGATE_CACHE/configsvc
#   TOOLGATE_VENV            the Python venv (default: the one scripts/pyenv.sh makes and prints)
#   PULSAR_BROKER_PORT       broker binary port (default 6650)
#   PULSAR_WEB_PORT          broker admin port (default 8080)
#   CASSANDRA_PORT           Cassandra CQL port (default 9042)
#   CONFIGSVC_KEYSPACE       Cassandra keyspace of the configuration (default: config, TrustGraph's)
#   CONFIGSVC_WORKSPACES     workspaces to register so that their own queues exist (default "default")
#   CONFIGSVC_START_TIMEOUT  seconds to wait for the first answer (default 60)
#   CONFIGSVC_LOG_LEVEL      config-svc log level (default INFO)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib/daemon.sh
source "$SCRIPT_DIR/lib/daemon.sh"
cache_dir configsvc
HELPER="$SCRIPT_DIR/../test/python/tgconfig.py"

BROKER_PORT="${PULSAR_BROKER_PORT:-6650}"
WEB_PORT="${PULSAR_WEB_PORT:-8080}"
CQL_PORT="${CASSANDRA_PORT:-9042}"
KEYSPACE="${CONFIGSVC_KEYSPACE:-config}"
WORKSPACES="${CONFIGSVC_WORKSPACES-default}"
START_TIMEOUT="${CONFIGSVC_START_TIMEOUT:-60}"
LOG_LEVEL="${CONFIGSVC_LOG_LEVEL:-INFO}"
PULSAR_URL="pulsar://127.0.0.1:$BROKER_PORT"
# one config service per broker
daemon_files configsvc "$BROKER_PORT" 6650 'config-svc|trustgraph\.config\.service'
DAEMON_WHAT=config-svc

for v in BROKER_PORT WEB_PORT CQL_PORT START_TIMEOUT; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
done
[[ "$KEYSPACE" =~ ^[A-Za-z][A-Za-z0-9_]{0,47}$ ]] || die "CONFIGSVC_KEYSPACE '$KEYSPACE' is not a Cassandra keyspace name"

venv() {
  if [[ -n "${TOOLGATE_VENV:-}" ]]; then
    [[ -x "$TOOLGATE_VENV/bin/python" ]] || die "TOOLGATE_VENV=$TOOLGATE_VENV has no bin/python"
    echo "$TOOLGATE_VENV"
  else
    "$SCRIPT_DIR/pyenv.sh"
  fi
}

# answers: the config service replied to a `config` request on the system queue
# (the helper's last complaint is kept in $PROBE_ERR for error messages)
PROBE_ERR=""
answers() { # $1 = python, $2 = timeout seconds
  PROBE_ERR="$("$1" "$HELPER" --pulsar "$PULSAR_URL" --timeout "$2" probe 2>&1 >/dev/null)"
}

register_workspaces() { # $1 = python
  [[ -n "$WORKSPACES" ]] || return 0
  # shellcheck disable=SC2086 # a list of names
  if ! "$1" "$HELPER" --pulsar "$PULSAR_URL" --timeout 30 ensure-workspace $WORKSPACES >/dev/null; then
    show_log_tail
    die "could not register workspaces: $WORKSPACES"
  fi
  log "workspaces ready: $WORKSPACES"
}

cmd_up() {
  take_lock
  local v py
  v="$(venv)"
  py="$v/bin/python"
  [[ -x "$v/bin/config-svc" ]] || die "no config-svc in $v (trustgraph-flow missing: run scripts/pyenv.sh)"
  "$py" -c 'import cassandra.cluster, trustgraph.config.service' 2>/dev/null ||
    die "config-svc cannot be imported in $v (run scripts/pyenv.sh to install cassandra-driver)"

  local pid
  if pid="$(our_pid)" && ! answers "$py" 5 && [[ "$PROBE_ERR" == *"config service error"* ]]; then
    # it answers, but with an error: its Cassandra went away (a fresh node has no keyspace,
    # and config-svc creates its schema only when it starts)
    log "config-svc (pid $pid) answers with an error (${PROBE_ERR#tgconfig: }); restarting it"
    stop_daemon "$pid" 15
  fi
  if pid="$(our_pid)"; then
    log "config-svc started by this script is running (pid $pid); waiting for an answer"
  else
    port_answers "$BROKER_PORT" || die "no Pulsar broker on 127.0.0.1:$BROKER_PORT (scripts/pulsar.sh up)"
    if answers "$py" 3; then
      log "a config service already answers on $PULSAR_URL (not started by this script)"
      register_workspaces "$py"
      return 0
    fi
    CASSANDRA_PORT="$CQL_PORT" "$SCRIPT_DIR/cassandra.sh" status 2>/dev/null ||
      die "no Cassandra answers CQL on 127.0.0.1:$CQL_PORT (scripts/cassandra.sh up)"

    local args=(
      --id config-svc
      -p "$PULSAR_URL" --pulsar-admin-url "http://127.0.0.1:$WEB_PORT"
      --cassandra-host 127.0.0.1 --cassandra-keyspace "$KEYSPACE"
      --no-loki-enabled --no-metrics -l "$LOG_LEVEL"
    )
    local cmd
    if [[ "$CQL_PORT" == 9042 ]]; then
      cmd=("$v/bin/config-svc" "${args[@]}")
    else
      # config-svc has no Cassandra port flag: its table store calls cassandra.cluster.Cluster
      # with hosts only (port 9042). Same service, with the driver's port bound to ours.
      cmd=("$py" -c '
import functools, sys
import cassandra.cluster
import trustgraph.tables.config as table
table.Cluster = functools.partial(cassandra.cluster.Cluster, port=int(sys.argv.pop(1)))
sys.argv[0] = "config-svc"
from trustgraph.config.service import run
run()' "$CQL_PORT" "${args[@]}")
    fi

    log "starting config-svc (broker $PULSAR_URL, Cassandra 127.0.0.1:$CQL_PORT keyspace $KEYSPACE; log $LOG)"
    pid="$(start_detached "$CACHE" config-svc "${cmd[@]}")"
  fi

  local t0=$SECONDS
  if ! wait_ready "$pid" "$START_TIMEOUT" answers "$py" 3; then
    log "last probe: ${PROBE_ERR:-(no output)}"
    die "config-svc did not answer a config request within ${START_TIMEOUT}s (still running as pid $pid; 'scripts/configsvc.sh down' stops it)"
  fi
  log "config-svc answers after $((SECONDS - t0))s (pid $pid)"
  register_workspaces "$py"
}

cmd_down() { daemon_down "broker $PULSAR_URL" 15; }

cmd_status() {
  local v
  v="$(venv)"
  daemon_status "broker $PULSAR_URL" answers "$v/bin/python" 5
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
