#!/usr/bin/env bash
# `make run`: a Pulsar broker (fetched on first use), the joke and echo
# services, and the gateway, on 127.0.0.1. The services announce their tools
# (persistent://tg/config/tool-descriptors) and the gateway registers them:
# no registry file is needed. TOOLGATE_REGISTRY=FILE adds one (e.g.
# examples/registry.yaml, whose entries then win over the announcements).
# Ctrl-C stops everything this script started.
#
# The broker is chosen by the rule of scripts/lib/broker.sh
# (TOOLGATE_PULSAR_URL + TOOLGATE_PULSAR_ADMIN_URL, else the local broker on
# PULSAR_BROKER_PORT / PULSAR_WEB_PORT), and every process started here is
# given that broker's URLs. Also: TOOLGATE_GRPC_ADDR, TOOLGATE_HTTP_ADDR,
# TOOLGATE_ADMIN_ADDR (the gateway's admin listener), TOOLGATE_REGISTRY, TOOLGATE_RUN_READY_TIMEOUT (seconds, default 60).
# Each process's output is shown here and kept in .cache/run/<http port>/.
# TOOLGATE_OPERATIONS=true serves durable operations: their records are
# signed with the key in TOOLGATE_OPERATIONS_KEY_FILE, by default
# .cache/run/operations.key, made on first use and kept for later runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/broker.sh
source scripts/lib/broker.sh

GRPC_ADDR="${TOOLGATE_GRPC_ADDR:-127.0.0.1:9090}"
HTTP_ADDR="${TOOLGATE_HTTP_ADDR:-127.0.0.1:8081}"
ADMIN_ADDR="${TOOLGATE_ADMIN_ADDR:-127.0.0.1:8082}"
REGISTRY="${TOOLGATE_REGISTRY:-}"
registry_args=()
[[ -z "$REGISTRY" ]] || registry_args=(--registry "$REGISTRY")
READY_TIMEOUT="${TOOLGATE_RUN_READY_TIMEOUT:-60}"
broker_select
PULSAR_URL="$TOOLGATE_PULSAR_URL"
ADMIN_URL="$TOOLGATE_PULSAR_ADMIN_URL"
LOGS="$PWD/.cache/run/${HTTP_ADDR##*:}"

pids=()
names=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	trap - INT TERM EXIT
	echo
	echo "==> stopping"
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	broker_down
}
trap cleanup EXIT
trap 'exit 130' INT TERM

broker_up

echo "==> building"
mkdir -p bin "$LOGS"
go build -o bin/ ./cmd/gateway ./cmd/joke-service ./cmd/echo-service

# start NAME CMD...: runs CMD in the background, its output shown here and
# kept in $LOGS/NAME.log (tee -i: Ctrl-C reaches the process, not its log).
start() {
	local name="$1"
	shift
	"$@" > >(tee -i "$LOGS/$name.log") 2>&1 &
	pids+=($!)
	names+=("$name")
}
# The key of durable operations' records (used with TOOLGATE_OPERATIONS=true).
if [[ -z "${TOOLGATE_OPERATIONS_KEY_FILE:-}" ]]; then
	TOOLGATE_OPERATIONS_KEY_FILE="$PWD/.cache/run/operations.key"
	if [[ ! -s "$TOOLGATE_OPERATIONS_KEY_FILE" ]]; then
		(umask 077 && head -c 48 /dev/urandom | base64 >"$TOOLGATE_OPERATIONS_KEY_FILE")
	fi
fi
export TOOLGATE_OPERATIONS_KEY_FILE
start joke-service bin/joke-service --pulsar-url "$PULSAR_URL"
start echo-service bin/echo-service --pulsar-url "$PULSAR_URL"
start gateway bin/gateway "${registry_args[@]}" --grpc-addr "$GRPC_ADDR" --http-addr "$HTTP_ADDR" --admin-addr "$ADMIN_ADDR" \
	--pulsar-url "$PULSAR_URL" --pulsar-admin-url "$ADMIN_URL" --allow-anonymous --operations

# alive PID: the process has not exited (an exited child stays a zombie
# until waited for, which kill -0 does not tell apart).
alive() {
	local st
	st="$(ps -o stat= -p "$1" 2>/dev/null || true)"
	[[ -n "$st" && "$st" != Z* ]]
}

not_ready() {
	echo >&2
	echo "toolgate did not come up: $1" >&2
	echo "  last GET http://$ADMIN_ADDR/readyz (admin listener): ${ready_status:-no answer} ${ready_body:-}" >&2
	echo "  broker: $PULSAR_URL (admin $ADMIN_URL)" >&2
	echo "  logs: $LOGS/{gateway,joke-service,echo-service}.log" >&2
	exit 1
}

deadline=$((SECONDS + READY_TIMEOUT))
ready_status="" ready_body=""
while :; do
	for i in "${!pids[@]}"; do
		alive "${pids[$i]}" || not_ready "${names[$i]} exited during start-up (see $LOGS/${names[$i]}.log)"
	done
	failed=()
	ready_body="$(curl -sS --max-time 2 -w '\n%{http_code}' "http://$ADMIN_ADDR/readyz" 2>&1 || true)"
	ready_status="HTTP ${ready_body##*$'\n'}"
	ready_body="${ready_body%$'\n'*}"
	ready_body="${ready_body%$'\n'}"
	[[ "$ready_status" == "HTTP 200" ]] || failed+=("the gateway's /readyz is not 200")
	broker_subscribed "$ADMIN_URL" non-persistent://tg/request/joke joke-service-request || failed+=("joke-service has no consumer on non-persistent://tg/request/joke at $ADMIN_URL")
	broker_subscribed "$ADMIN_URL" non-persistent://tg/request/echo echo-service-request || failed+=("echo-service has no consumer on non-persistent://tg/request/echo at $ADMIN_URL")
	for tool in tell-joke echo; do
		curl -fsS --max-time 2 -o /dev/null "http://$HTTP_ADDR/v1/tools/$tool" 2>/dev/null ||
			failed+=("the gateway does not list $tool (announced by its service)")
	done
	((${#failed[@]} == 0)) && break
	if ((SECONDS >= deadline)); then
		reasons="$(printf '%s; ' "${failed[@]}")"
		not_ready "after ${READY_TIMEOUT}s, ${reasons%; }"
	fi
	sleep 0.25
done

cat <<MSG

toolgate is up: gRPC on $GRPC_ADDR, HTTP on $HTTP_ADDR, admin (metrics, readiness details) on $ADMIN_ADDR,
broker $PULSAR_URL (admin $ADMIN_URL). Try:

  curl -s -X POST http://$HTTP_ADDR/v1/tools/tell-joke:invoke -d '{"arguments": {"topic": "programming"}}'
  curl -s -X POST http://$HTTP_ADDR/v1/tools/tell-joke:start -d '{"arguments": {"topic": "cats"}}'
  curl -s http://$HTTP_ADDR/v1/operations/<id>      # the id the start answered

Logs: $LOGS/. Ctrl-C stops everything.
MSG
set +e
wait -n -p exited "${pids[@]}"
code=$?
for i in "${!pids[@]}"; do
	[[ "${pids[$i]}" == "${exited:-}" ]] && echo "==> ${names[$i]} exited (status $code); see $LOGS/${names[$i]}.log" >&2
done
exit 1
