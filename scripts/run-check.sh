#!/usr/bin/env bash
# Checks that `make run` on non-default ports reaches only its own broker:
# starts it on ports chosen now (broker, admin, HTTP, gRPC), waits for
# "toolgate is up", runs the curl it prints, then asserts
#   - on its broker's admin API: both services' subscriptions and the
#     gateway's response subscriptions have consumers;
#   - every TCP connection its processes hold goes to one of its own ports;
#   - a broker on the default ports, if one runs, got no new consumer on
#     the example topics meanwhile;
# and finally stops it with SIGINT, as Ctrl-C does, and checks that every
# process it started has exited and its ports are free.
#
# Environment: TOOLGATE_CACHE (passed on to scripts/pulsar.sh),
# RUN_CHECK_TIMEOUT (seconds for `make run` to come up, default 90).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/broker.sh
source scripts/lib/broker.sh
t0=$SECONDS

fail() {
	echo "run-check: FAIL: $*" >&2
	if [[ -n "${LOG:-}" && -f "$LOG" ]]; then
		echo "run-check: last lines of the make run output ($LOG):" >&2
		grep -v '^time=' "$LOG" | tail -n 25 >&2 || true
	fi
	exit 1
}
say() { echo "run-check: $*"; }

# A port nothing listens on, outside the ephemeral range, not yet taken.
declare -A taken=()
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 12000))
		[[ -n "${taken[$p]:-}" ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			taken[$p]=1
			echo "$p"
			return 0
		fi
	done
	fail "no free port found"
}
BP=$(free_port) && WP=$(free_port) && HP=$(free_port) && GP=$(free_port) && AP=$(free_port)
ADMIN="http://127.0.0.1:$WP"
DEFAULT_ADMIN="http://127.0.0.1:8080"
CACHE="${TOOLGATE_CACHE:-$PWD/.cache}"
DATA="$(mktemp -d)"
LOG="$(mktemp)"
say "make run on broker :$BP (admin :$WP), HTTP :$HP, gRPC :$GP; output in $LOG"

# The consumers on the example topics of a broker: topic sub name since.
consumers() {
	local t c
	for t in request/joke request/echo response/joke response/echo; do
		while read -r c; do
			echo "$t $c"
		done < <(broker_consumers "$1" "non-persistent://tg/$t") # no such topic yet: none
	done
}
default_runs=0
if [[ "$(broker_ready_code "$DEFAULT_ADMIN")" == 200 ]]; then
	default_runs=1
	before="$(consumers "$DEFAULT_ADMIN")"
fi

sid=""
cleanup() {
	local code=$?
	if [[ -n "$sid" ]] && ps -s "$sid" -o pid= >/dev/null 2>&1; then
		kill -INT -- "-$sid" 2>/dev/null || true
		sleep 3
		kill -TERM -- "-$sid" 2>/dev/null || true
	fi
	# the broker runs in a session of its own; stop it whatever happened
	PULSAR_BROKER_PORT=$BP PULSAR_WEB_PORT=$WP PULSAR_DATA_DIR="$DATA" scripts/pulsar.sh down >/dev/null 2>&1 || true
	rm -rf "$DATA"
	if [[ $code == 0 ]]; then
		rm -f "$LOG" "$CACHE/pulsar/pulsar-$WP.log" "$CACHE/pulsar/pulsar-$WP.log.prev" "$CACHE/pulsar/.lock-$WP"
		rm -rf ".cache/run/$HP"
	fi
}
trap cleanup EXIT

# A session of its own (so SIGINT reaches all of it, as Ctrl-C reaches a
# terminal's foreground job), with SIGINT not ignored (background jobs of a
# script inherit it ignored). The broker URLs come only from the ports.
env -u TOOLGATE_PULSAR_URL -u TOOLGATE_PULSAR_ADMIN_URL -u TOOLGATE_CONFIG \
	PULSAR_BROKER_PORT="$BP" PULSAR_WEB_PORT="$WP" PULSAR_DATA_DIR="$DATA" \
	TOOLGATE_HTTP_ADDR="127.0.0.1:$HP" TOOLGATE_GRPC_ADDR="127.0.0.1:$GP" TOOLGATE_ADMIN_ADDR="127.0.0.1:$AP" \
	env --default-signal=INT,QUIT setsid make run >"$LOG" 2>&1 </dev/null &
sid=$!

deadline=$((SECONDS + ${RUN_CHECK_TIMEOUT:-90}))
until grep -q '^toolgate is up' "$LOG"; do
	kill -0 "$sid" 2>/dev/null || fail "make run exited before it was up"
	((SECONDS < deadline)) || fail "make run not up after ${RUN_CHECK_TIMEOUT:-90}s"
	sleep 0.5
done
say "up after $((SECONDS - t0))s"

# The curl it prints works.
invoke="$(grep -m1 '^  curl ' "$LOG")" || fail "no curl line in the output"
[[ "$invoke" == *"127.0.0.1:$HP/"* ]] || fail "the printed curl does not use HTTP port $HP: $invoke"
out="$(bash -c "$invoke")" || fail "the printed curl failed: $invoke"
[[ "$out" == *'"output"'* ]] || fail "the printed curl answered $out"
say "printed curl answered: ${out:0:80}…"

# Its broker has the subscriptions of both services and of the gateway.
mine="$(consumers "$ADMIN")"
for want in "request/joke joke-service-request" "request/echo echo-service-request" "response/joke toolgate-" "response/echo toolgate-"; do
	grep -q "^$want" <<<"$mine" || fail "no consumer '$want' on its own broker ($ADMIN); it has:
$mine"
done
say "its broker has the consumers: $(cut -d' ' -f1,2 <<<"$mine" | tr '\n' ',' | sed 's/,$//')"

# Every TCP connection of its processes goes to one of its own ports.
pids="$(ps -s "$sid" -o pid= | tr -s ' \n' ' ')"
remote="$(python3 - "$pids" <<'PY'
import os, sys
inodes = {}
for pid in sys.argv[1].split():
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    comm = open(f"/proc/{pid}/comm").read().strip()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes[link[8:-1]] = comm
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).readlines()[1:]:
        f = line.split()
        if f[3] == "01" and f[9] in inodes:  # established
            print(inodes[f[9]], int(f[2].rsplit(":", 1)[1], 16))
PY
)"
[[ -n "$remote" ]] || fail "its processes ($pids) hold no TCP connection at all"
while read -r comm port; do
	case "$port" in
		"$BP" | "$WP" | "$HP" | "$GP") ;;
		*) fail "$comm holds a connection to port $port, which is not one of this run's ($BP $WP $HP $GP)" ;;
	esac
done <<<"$remote"
grep -q " $BP\$" <<<"$remote" || fail "no process is connected to its broker port $BP"
say "connections of its processes: $(sort -u <<<"$remote" | tr '\n' ',' | sed 's/,$//')"

# Nothing of it subscribed on the default broker.
if [[ $default_runs == 1 ]]; then
	after="$(consumers "$DEFAULT_ADMIN")"
	new="$(comm -13 <(sort <<<"$before") <(sort <<<"$after"))"
	[[ -z "$new" ]] || fail "new consumers on the default broker ($DEFAULT_ADMIN) while it ran:
$new"
	say "the default broker ($DEFAULT_ADMIN) got no new consumer"
fi

# SIGINT, as Ctrl-C: everything it started exits, its ports are free.
broker_pid="$(cat "$CACHE/pulsar/pulsar-$WP.pid" 2>/dev/null || true)"
[[ -n "$broker_pid" ]] || fail "no pid file of its broker in $CACHE/pulsar"
kill -INT -- "-$sid"
deadline=$((SECONDS + 40))
while [[ -n "$(ps -s "$sid" -o pid= 2>/dev/null)" ]] || kill -0 "$broker_pid" 2>/dev/null; do
	((SECONDS < deadline)) || fail "still running 40s after SIGINT: $(ps -s "$sid" -o pid=,args= 2>/dev/null) $(kill -0 "$broker_pid" 2>/dev/null && echo "broker pid $broker_pid")"
	sleep 0.5
done
sid=""
for p in "$BP" "$WP" "$HP" "$GP" "$AP"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then fail "port $p still answers after the stop"; fi
done
grep -q "stopping the Pulsar broker this run started" "$LOG" || fail "make run did not stop the broker it started"
say "PASS in $((SECONDS - t0))s: make run reached only its own broker and stopped everything on SIGINT"
