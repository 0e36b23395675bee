#!/usr/bin/env bash
# `make test`: every test, against a real Pulsar broker. Starts the broker
# when none is running (and stops what it started), prepares the Python
# virtualenv with TrustGraph's reference services, then runs the Go tests
# with the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."

started=0
cleanup() {
	if [[ $started == 1 ]]; then
		echo "==> stopping the Pulsar broker this run started"
		scripts/pulsar.sh down || true
	fi
}
trap cleanup EXIT

t0=$SECONDS
if scripts/pulsar.sh status >/dev/null 2>&1; then
	echo "==> using the Pulsar broker already running"
	scripts/pulsar.sh ensure-ns
else
	echo "==> starting a Pulsar broker for the tests"
	started=1
	scripts/pulsar.sh up
fi
export TOOLGATE_PULSAR_URL="${TOOLGATE_PULSAR_URL:-pulsar://127.0.0.1:${PULSAR_BROKER_PORT:-6650}}"
export TOOLGATE_PULSAR_ADMIN_URL="${TOOLGATE_PULSAR_ADMIN_URL:-http://127.0.0.1:${PULSAR_WEB_PORT:-8080}}"

echo "==> preparing the Python virtualenv (TrustGraph reference services, grpcio)"
TOOLGATE_VENV="$(scripts/pyenv.sh)"
export TOOLGATE_VENV

echo "==> headless Chromium for the browser tests"
TOOLGATE_CHROMIUM="$(scripts/chromium.sh)"
export TOOLGATE_CHROMIUM

echo "==> go vet"
go vet ./...
echo "==> go test -race ./... (broker: $TOOLGATE_PULSAR_URL)"
# test/restart runs without the race detector: pulsar-client-go v0.19.0 (the
# newest release) has a data race of its own in producer reconnection
# (partitionProducer.grabCnx writes the encryptor that a concurrent send
# reads), which -race reports whenever a broker restarts under load.
go test -race -count=1 -timeout 15m ${GOTEST_FLAGS:-} $(go list ./... | grep -v '/test/restart$')
echo "==> go test ./test/restart (a broker of its own, stopped and restarted under load)"
go test -count=1 -timeout 10m ${GOTEST_FLAGS:-} ./test/restart
echo "==> all tests passed in $((SECONDS - t0)) s"
