#!/usr/bin/env bash
# `make run`: a Pulsar broker (fetched on first use), the joke and echo
# services, and the gateway with examples/registry.yaml, on 127.0.0.1.
# Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."

GRPC_ADDR="${TOOLGATE_GRPC_ADDR:-127.0.0.1:9090}"
HTTP_ADDR="${TOOLGATE_HTTP_ADDR:-127.0.0.1:8081}"
REGISTRY="${TOOLGATE_REGISTRY:-examples/registry.yaml}"
pids=()
started=0
cleanup() {
	trap - INT TERM EXIT
	echo
	echo "==> stopping"
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [[ $started == 1 ]]; then scripts/pulsar.sh down || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if scripts/pulsar.sh status >/dev/null 2>&1; then
	echo "==> using the Pulsar broker already running"
	scripts/pulsar.sh ensure-ns
else
	started=1
	scripts/pulsar.sh up
fi

echo "==> building"
mkdir -p bin
go build -o bin/ ./cmd/gateway ./cmd/joke-service ./cmd/echo-service

bin/joke-service & pids+=($!)
bin/echo-service & pids+=($!)
bin/gateway --registry "$REGISTRY" --grpc-addr "$GRPC_ADDR" --http-addr "$HTTP_ADDR" \
	--pulsar-admin-url "http://127.0.0.1:${PULSAR_WEB_PORT:-8080}" --allow-anonymous & pids+=($!)

for _ in $(seq 1 150); do
	if curl -fsS "http://$HTTP_ADDR/readyz" >/dev/null 2>&1 \
		&& curl -fsS "http://127.0.0.1:${PULSAR_WEB_PORT:-8080}/admin/v2/non-persistent/tg/request/joke/stats" 2>/dev/null | grep -q joke-service-request; then
		break
	fi
	sleep 0.2
done
curl -fsS "http://$HTTP_ADDR/readyz" >/dev/null || { echo "the gateway did not become ready"; exit 1; }

cat <<MSG

toolgate is up: gRPC on $GRPC_ADDR, HTTP on $HTTP_ADDR. Try:

  curl -s -X POST http://$HTTP_ADDR/v1/tools/tell-joke:invoke -d '{"arguments": {"topic": "programming"}}'

Ctrl-C stops everything.
MSG
wait -n "${pids[@]}"
