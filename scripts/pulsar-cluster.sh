#!/usr/bin/env bash
# A local Apache Pulsar cluster from the same Maven jars as scripts/pulsar.sh
# (no Docker): one ZooKeeper (the metadata store, as Pulsar ships it), one
# bookie and two brokers, all on 127.0.0.1, with the cluster's metadata
# initialised (PulsarClusterMetadataSetup, what `pulsar
# initialize-cluster-metadata` runs) and tenant tg with the namespaces of
# scripts/pulsar.sh. Bundles move between the brokers only when unloaded
# (load shedding is off), so tests decide where topics live.
#
#   scripts/pulsar-cluster.sh up         start everything, wait until each broker is ready, create the namespaces
#   scripts/pulsar-cluster.sh down       stop what this script started (brokers, bookie, ZooKeeper)
#   scripts/pulsar-cluster.sh status     exit 0 when both brokers answer ready
#   scripts/pulsar-cluster.sh pid NAME   print the pid of zookeeper, bookie, broker1 or broker2 (for tests that kill one)
#
# Ports (defaults in 26xxx: below the kernel's ephemeral range, so a client's
# outgoing connection never takes one, and apart from the standalone's
# 6650/8080):
#   PULSAR_CLUSTER_ZK_PORT        ZooKeeper client port (default 26181)
#   PULSAR_CLUSTER_BOOKIE_PORT    bookie port (default 26182)
#   PULSAR_CLUSTER_BROKER1_PORT   broker 1 binary port (default 26650), PULSAR_CLUSTER_WEB1_PORT its admin port (default 26080)
#   PULSAR_CLUSTER_BROKER2_PORT   broker 2 binary port (default 26651), PULSAR_CLUSTER_WEB2_PORT its admin port (default 26081)
# Other settings:
#   TOOLGATE_CACHE                cache root (default <repo>/.cache); jars, logs and pid files in $TOOLGATE_CACHE/pulsar
#   PULSAR_CLUSTER_NAME           the cluster's name (default toolgate-cluster)
#   PULSAR_CLUSTER_SESSION_TIMEOUT_MS  brokers' metadata-store session timeout (default 10000): how long a
#                                 killed broker keeps its bundles before the other broker may take them
#   PULSAR_CLUSTER_HEAP           max heap of each broker (default 384m; ZooKeeper 128m, the bookie 256m)
#   PULSAR_CLUSTER_DATA_DIR       keep the data here (default: a fresh folder per `up`)
#   PULSAR_START_TIMEOUT          seconds to wait for each step (default 180)
#   PULSAR_NAMESPACES, PULSAR_COMPACTION_THRESHOLD, PULSAR_JAVA: as for scripts/pulsar.sh
#
# Sized for a 2-core machine that also runs the tests: about 1.6 GB of
# memory for the four JVMs, small thread pools, one bundle per namespace.
set -euo pipefail

PULSAR_VERSION=4.2.4
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib/daemon.sh
source "$SCRIPT_DIR/lib/daemon.sh"
# shellcheck source=scripts/lib/jvm.sh
source "$SCRIPT_DIR/lib/jvm.sh"
# shellcheck source=scripts/lib/broker.sh
source "$SCRIPT_DIR/lib/broker.sh"
CONF_DIR="$SCRIPT_DIR/pulsar"
POM="$CONF_DIR/pom.xml"
cache_dir pulsar
LIB="$CACHE/lib"

ZK_PORT="${PULSAR_CLUSTER_ZK_PORT:-26181}"
BOOKIE_PORT="${PULSAR_CLUSTER_BOOKIE_PORT:-26182}"
BROKER_PORTS=("${PULSAR_CLUSTER_BROKER1_PORT:-26650}" "${PULSAR_CLUSTER_BROKER2_PORT:-26651}")
WEB_PORTS=("${PULSAR_CLUSTER_WEB1_PORT:-26080}" "${PULSAR_CLUSTER_WEB2_PORT:-26081}")
CLUSTER="${PULSAR_CLUSTER_NAME:-toolgate-cluster}"
SESSION_TIMEOUT_MS="${PULSAR_CLUSTER_SESSION_TIMEOUT_MS:-10000}"
HEAP="${PULSAR_CLUSTER_HEAP:-384m}"
START_TIMEOUT="${PULSAR_START_TIMEOUT:-180}"
NAMESPACES="${PULSAR_NAMESPACES:-tg/request tg/response tg/notify tg/config tg/operations}"
COMPACTION_THRESHOLD="${PULSAR_COMPACTION_THRESHOLD:-1048576}"
DAEMON_ERRORS=' ERROR '

command -v curl >/dev/null || die "curl is required"

# component NAME: point daemon.sh's PIDFILE, LOG and DAEMON_PATTERN at one
# process of the cluster (zookeeper, bookie, broker1, broker2), keyed by the
# ZooKeeper port so that two clusters on other ports do not meet.
component() {
	local pattern
	case "$1" in
		zookeeper) pattern='QuorumPeerMain' ;;
		bookie) pattern='org\.apache\.bookkeeper\.server\.Main' ;;
		broker1) pattern="PulsarBrokerStarter .*broker-${WEB_PORTS[0]}\.conf" ;;
		broker2) pattern="PulsarBrokerStarter .*broker-${WEB_PORTS[1]}\.conf" ;;
		*) die "unknown component '$1' (zookeeper, bookie, broker1, broker2)" ;;
	esac
	daemon_files "cluster-$1" "$ZK_PORT" "" "$pattern"
	DAEMON_WHAT="the cluster's $1"
	DAEMON_FAILED=''
	[[ "$1" != broker* ]] || DAEMON_FAILED='Failed to start Pulsar service'
}
COMPONENTS=(zookeeper bookie broker1 broker2)

zk_ready() { listening "$ZK_PORT" && [[ "$(zk_cmd ruok)" == imok ]]; }
zk_cmd() { # a ZooKeeper four-letter word
	(
		exec 3<>"/dev/tcp/127.0.0.1/$ZK_PORT" || exit 1
		printf '%s' "$1" >&3
		timeout 3 cat <&3
	) 2>/dev/null || true
}
bookie_ready() { listening "$BOOKIE_PORT"; }
broker_ready() { listening "${WEB_PORTS[$1]}" && [[ "$(broker_ready_code "http://127.0.0.1:${WEB_PORTS[$1]}")" == 200 ]]; }
all_ready() { broker_ready 0 && broker_ready 1; }

# fill TEMPLATE OUT: the config template with its @VAR@s replaced
fill() {
	sed -e "s|@DATA@|$DATA|g" -e "s|@ZK_PORT@|$ZK_PORT|g" -e "s|@BOOKIE_PORT@|$BOOKIE_PORT|g" \
		-e "s|@CLUSTER@|$CLUSTER|g" -e "s|@SESSION_TIMEOUT_MS@|$SESSION_TIMEOUT_MS|g" \
		-e "s|@BROKER_PORT@|${BROKER_PORT:-}|g" -e "s|@WEB_PORT@|${WEB_PORT:-}|g" \
		"$CONF_DIR/cluster/$1" >"$2"
}

# jvm_flags HEAP LOGFILE: the flags every JVM of the cluster runs with (those
# of Pulsar's bin/pulsar), one a line.
jvm_flags() {
	printf '%s\n' -Xms64m "-Xmx$1" -XX:MaxDirectMemorySize=256m \
		-XX:+UseG1GC -XX:MaxGCPauseMillis=10 -XX:+ExitOnOutOfMemoryError -XX:TieredStopAtLevel=1 \
		-Djava.net.preferIPv4Stack=true -Dio.netty.tryReflectionSetAccessible=true \
		--add-opens java.base/java.io=ALL-UNNAMED --add-opens java.base/java.util.zip=ALL-UNNAMED \
		--add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/jdk.internal.misc=ALL-UNNAMED \
		--add-opens java.base/sun.net=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED \
		--add-opens java.management/sun.management=ALL-UNNAMED \
		--add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.platform=ALL-UNNAMED \
		-Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver \
		-Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver \
		-Dzookeeper.4lw.commands.whitelist=ruok,stat \
		"-Dlog4j.configurationFile=$CONF_DIR/log4j2.xml" "-Dpulsar.log.file=$2" \
		-Dpulsar.allocator.exit_on_oom=true
	# the class-data archive scripts/pulsar.sh records, when there is one
	# (it holds the broker's classes; only used here, never recorded)
	cds_flags "${PULSAR_CDS:-1}" "$JAVA" | grep -v -e ArchiveClassesAtExit || true
}

# start NAME HEAP MAINCLASS ARGS...: start one component detached
start() {
	local name="$1" heap="$2"
	shift 2
	component "$name"
	local jvm=()
	mapfile -t jvm < <(jvm_flags "$heap" "$LOG")
	start_detached "$DATA" java "$JAVA" "${jvm[@]}" -cp "$LIB/*" "$@"
}

# wait_for NAME PID CMD...: wait until CMD says the component is ready
wait_for() {
	local name="$1" pid="$2"
	shift 2
	component "$name"
	wait_ready "$pid" "$START_TIMEOUT" "$@" ||
		die "$DAEMON_WHAT was not ready after ${START_TIMEOUT}s (still running as pid $pid; '$0 down' stops it)"
}

# admin CODES METHOD PATH [BODY]: an admin request to broker 1; dies unless
# the HTTP status is one of CODES ("204|409")
admin() {
	local codes="$1" method="$2" path="$3" body="${4:-}" out code
	out="$(mktemp)"
	local args=(-s -o "$out" -w '%{http_code}' --max-time 30 -X "$method")
	[[ -z "$body" ]] || args+=(-H 'Content-Type: application/json' --data "$body")
	code="$(curl "${args[@]}" "http://127.0.0.1:${WEB_PORTS[0]}/admin/v2/$path" 2>/dev/null || true)"
	if [[ ! "$code" =~ ^($codes)$ ]]; then
		cat "$out" >&2
		rm -f "$out"
		die "$method /admin/v2/$path: HTTP $code"
	fi
	rm -f "$out"
}

ensure_ns() {
	admin '204|409' PUT tenants/tg "{\"adminRoles\":[],\"allowedClusters\":[\"$CLUSTER\"]}"
	local ns
	for ns in $NAMESPACES; do admin '204|409' PUT "namespaces/$ns"; done
	if [[ " $NAMESPACES " == *" tg/config "* ]]; then
		# announcements are keyed by service id: compaction keeps the latest per key
		admin '200|204' PUT namespaces/tg/config/compactionThreshold "$COMPACTION_THRESHOLD"
	fi
	if [[ " $NAMESPACES " == *" tg/operations "* ]]; then
		# durable operations' state table (docs/operations.md): the latest
		# record per operation id, kept while no reader is attached
		admin '200|204' PUT namespaces/tg/operations/compactionThreshold "$COMPACTION_THRESHOLD"
		admin '200|204' POST namespaces/tg/operations/retention '{"retentionTimeInMinutes": 2880, "retentionSizeInMB": -1}'
	fi
	log "namespaces ready: $NAMESPACES"
}

any_running() {
	local c
	for c in "${COMPONENTS[@]}"; do
		component "$c"
		our_pid >/dev/null && return 0
	done
	return 1
}

cmd_up() {
	component zookeeper
	LOCK="$CACHE/.lock-cluster-$ZK_PORT"
	take_lock
	if all_ready; then
		log "using the cluster already running (brokers :${WEB_PORTS[0]} and :${WEB_PORTS[1]})"
		ensure_ns
		return 0
	fi
	any_running && die "part of the cluster runs but the brokers are not ready: '$0 down' first (logs: $CACHE/cluster-*-$ZK_PORT.log)"
	local port
	for port in "$ZK_PORT" "$BOOKIE_PORT" "${BROKER_PORTS[@]}" "${WEB_PORTS[@]}"; do
		port_taken "$port" && die "port $port on 127.0.0.1 is taken (set the PULSAR_CLUSTER_*_PORT variables, or stop what uses it)"
	done
	fetch_jars "Pulsar $PULSAR_VERSION" "pulsar-broker-$PULSAR_VERSION.jar" 'zookeeper-*.jar' 'bookkeeper-server-*.jar'
	JAVA="$(java_bin "${PULSAR_JAVA:-}" "Pulsar $PULSAR_VERSION" 17+)"
	DATA="$(data_dir "${PULSAR_CLUSTER_DATA_DIR:-}" "cluster-$ZK_PORT")"
	mkdir -p "$DATA/zookeeper" "$DATA/bookie/journal" "$DATA/bookie/ledgers"
	local t0=$SECONDS pid pids=()

	fill zookeeper.conf "$DATA/zookeeper.conf"
	log "starting ZooKeeper on 127.0.0.1:$ZK_PORT (data $DATA)"
	pid="$(start zookeeper 128m org.apache.zookeeper.server.quorum.QuorumPeerMain "$DATA/zookeeper.conf")"
	wait_for zookeeper "$pid" zk_ready

	log "initialising the metadata of cluster $CLUSTER (and of BookKeeper)"
	local brokers="" webs="" i
	for i in 0 1; do
		brokers+="${brokers:+,}127.0.0.1:${BROKER_PORTS[$i]}"
		webs+="${webs:+,}http://127.0.0.1:${WEB_PORTS[$i]}"
	done
	local jvm=() setup_log="$CACHE/cluster-setup-$ZK_PORT.log"
	mapfile -t jvm < <(jvm_flags 128m "$setup_log")
	: >"$setup_log"
	if ! "$JAVA" "${jvm[@]}" -cp "$LIB/*" org.apache.pulsar.PulsarClusterMetadataSetup \
		--cluster "$CLUSTER" --metadata-store "zk:127.0.0.1:$ZK_PORT" \
		--configuration-metadata-store "zk:127.0.0.1:$ZK_PORT" \
		--web-service-url "$webs" --broker-service-url "pulsar://$brokers" \
		--default-namespace-bundle-number 1 >>"$setup_log" 2>&1; then
		tail -n 40 "$setup_log" >&2
		die "PulsarClusterMetadataSetup failed (log $setup_log)"
	fi

	fill bookie.conf "$DATA/bookie.conf"
	log "starting the bookie on 127.0.0.1:$BOOKIE_PORT"
	pid="$(start bookie 256m org.apache.bookkeeper.server.Main --conf "$DATA/bookie.conf")"
	wait_for bookie "$pid" bookie_ready

	for i in 0 1; do
		BROKER_PORT="${BROKER_PORTS[$i]}" WEB_PORT="${WEB_PORTS[$i]}" fill broker.conf "$DATA/broker-${WEB_PORTS[$i]}.conf"
		log "starting broker$((i + 1)) on pulsar://127.0.0.1:${BROKER_PORTS[$i]} (admin :${WEB_PORTS[$i]})"
		pids+=("$(start "broker$((i + 1))" "$HEAP" org.apache.pulsar.PulsarBrokerStarter --broker-conf "$DATA/broker-${WEB_PORTS[$i]}.conf")")
	done
	for i in 0 1; do
		wait_for "broker$((i + 1))" "${pids[$i]}" broker_ready "$i"
		log "broker$((i + 1)) ready after $((SECONDS - t0))s (pid ${pids[$i]})"
	done
	ensure_ns
	log "cluster $CLUSTER up in $((SECONDS - t0))s: pulsar://$brokers  $webs"
}

cmd_down() {
	component zookeeper
	LOCK="$CACHE/.lock-cluster-$ZK_PORT"
	take_lock
	local c pid any=0
	# brokers first (they close their ledgers on the bookie), ZooKeeper last
	for c in broker1 broker2 bookie zookeeper; do
		component "$c"
		if pid="$(our_pid)"; then
			stop_daemon "$pid" 20
			any=1
		fi
		rm -f "$PIDFILE"
	done
	((any)) || log "not running"
}

cmd_status() {
	local c pid ok=0
	for c in "${COMPONENTS[@]}"; do
		component "$c"
		if pid="$(our_pid)"; then log "$c: running (pid $pid)"; else log "$c: not running"; fi
	done
	all_ready && ok=1
	if ((ok)); then log "both brokers ready (admin :${WEB_PORTS[0]} and :${WEB_PORTS[1]})"; else log "the brokers are not both ready"; fi
	((ok))
}

cmd_pid() {
	component "${1:-}"
	our_pid || die "$DAEMON_WHAT is not running"
}

case "${1:-}" in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	pid) cmd_pid "${2:-}" ;;
	*) echo "usage: $0 up|down|status|pid NAME" >&2; exit 2 ;;
esac
