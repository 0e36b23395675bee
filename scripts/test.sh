#!/usr/bin/env bash
# `make test`: every test, against a real Pulsar broker. Starts the broker
# when none is running (and stops what it started), prepares the Python
# virtualenv with TrustGraph's reference services, runs the Python SDK's
# checks (sdk/python/check.sh), then runs the Go tests
# with the race detector, and checks `make run` (scripts/run-check.sh).
# TrustGraph's config service (scripts/configsvc.sh, with Cassandra from
# scripts/cassandra.sh) is started too, when none runs, and stopped again:
# the registry's config-service source is tested against it. A Redis server
# (scripts/redis.sh) is started likewise for the quotas' shared store, and
# its binary is handed to the tests that start and stop Redis servers of
# their own (TOOLGATE_REDIS_SERVER).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/broker.sh
source scripts/lib/broker.sh

# The broker every test uses, by the rule in scripts/lib/broker.sh:
# TOOLGATE_PULSAR_URL + TOOLGATE_PULSAR_ADMIN_URL, else the local broker on
# PULSAR_BROKER_PORT / PULSAR_WEB_PORT (started here when none runs).
broker_select
CASSANDRA_STARTED=0
CONFIGSVC_STARTED=0
REDIS_STARTED=0
# the config service talks to the same broker (by port, on 127.0.0.1)
export PULSAR_BROKER_PORT="${PULSAR_BROKER_PORT:-${TOOLGATE_PULSAR_URL##*:}}"
export PULSAR_WEB_PORT="${PULSAR_WEB_PORT:-${TOOLGATE_PULSAR_ADMIN_URL##*:}}"
stop_all() {
	if [[ $REDIS_STARTED == 1 ]]; then scripts/redis.sh down || true; fi
	if [[ $CONFIGSVC_STARTED == 1 ]]; then scripts/configsvc.sh down || true; fi
	if [[ $CASSANDRA_STARTED == 1 ]]; then scripts/cassandra.sh down || true; fi
	broker_down
}
trap stop_all EXIT

t0=$SECONDS
broker_up

echo "==> preparing the Python virtualenv (TrustGraph reference services, grpcio) [$((SECONDS - t0)) s]"
TOOLGATE_VENV="$(scripts/pyenv.sh)"
export TOOLGATE_VENV

echo "==> the Python SDK's checks: ruff, mypy --strict, pytest (sdk/python/check.sh) [$((SECONDS - t0)) s]"
sdk/python/check.sh

echo "==> Cassandra and TrustGraph's config-svc (the registry's config-service source) [$((SECONDS - t0)) s]"
if ! scripts/cassandra.sh status >/dev/null 2>&1; then CASSANDRA_STARTED=1; fi
scripts/cassandra.sh up
if ! scripts/configsvc.sh status >/dev/null 2>&1; then CONFIGSVC_STARTED=1; fi
scripts/configsvc.sh up

echo "==> Redis (the quotas' shared store) [$((SECONDS - t0)) s]"
if ! scripts/redis.sh status >/dev/null 2>&1; then REDIS_STARTED=1; fi
TOOLGATE_REDIS_URL="$(scripts/redis.sh up)"
REDIS_PORT="${TOOLGATE_REDIS_URL##*:}" # `down` stops the one on the port `up` chose
TOOLGATE_REDIS_SERVER="$(scripts/redis.sh path)"
export TOOLGATE_REDIS_URL TOOLGATE_REDIS_SERVER REDIS_PORT

echo "==> Prometheus and promtool (the chart's alerts and dashboard) [$((SECONDS - t0)) s]"
TOOLGATE_PROMETHEUS="$(scripts/prometheus.sh)"
TOOLGATE_PROMTOOL="$(scripts/prometheus.sh promtool)"
export TOOLGATE_PROMETHEUS TOOLGATE_PROMTOOL

echo "==> headless Chromium for the browser tests [$((SECONDS - t0)) s]"
TOOLGATE_CHROMIUM="$(scripts/chromium.sh)"
export TOOLGATE_CHROMIUM

echo "==> go test -race ./... (broker: $TOOLGATE_PULSAR_URL) [$((SECONDS - t0)) s]"
# test/restart runs without the race detector: pulsar-client-go has a data
# race of its own in producer reconnection (partitionProducer.grabCnx writes
# the encryptor that a concurrent send reads; seen with v0.19.0, and the code
# is the same in v0.21.0), which -race reports whenever a broker restarts
# under load.
read -r -a gotest_flags <<<"${GOTEST_FLAGS:-}" # extra flags, split on white space
mapfile -t packages < <(go list ./... | grep -v -e '/test/restart$' -e '/test/shutdown$' -e '/test/cluster$' -e '/test/scale$')
# The tests whose promise is a time — TestHTTP2Abuse compares a client's
# latency under attack with its latency before, TestFrozenAndKilledReplicas
# answers each call within 1 s of a frozen replica; the quotas bound each
# call by --quota-redis-timeout + 50 ms while Redis is refused or stalled — run
# alone, after the others, so that no other package's load falls in them.
timed='^(TestHTTP2Abuse|TestFrozenAndKilledReplicas|TestRedisTimeoutHonoured|TestRedisStall)$'
go test -race -count=1 -timeout 15m "${gotest_flags[@]}" -skip "$timed" "${packages[@]}"
echo "==> go test -race -run '$timed' ./test/e2e ./internal/quota (bounds in time: the machine to themselves) [$((SECONDS - t0)) s]"
go test -race -count=1 -p 1 -timeout 5m "${gotest_flags[@]}" -run "$timed" ./internal/quota ./test/e2e
echo "==> go test -race ./... in bench/ (the benchmark harness, a module of its own) [$((SECONDS - t0)) s]"
go -C bench test -race -count=1 -timeout 5m "${gotest_flags[@]}" ./...
# Every fuzz target, briefly (FUZZTIME each, default 2 s; longer: make
# fuzz). A new finding fails the run like any test: Go keeps the input in
# the package's testdata/fuzz/, to be committed with the fix. The engine
# failing without an input (a loaded machine) is retried, then reported,
# and does not fail the run (scripts/fuzz.sh).
# FUZZ_IN_TEST=0 skips this step (a quick local run).
if [[ "${FUZZ_IN_TEST:-1}" == 1 ]]; then
	echo "==> fuzz targets, ${FUZZTIME:-2s} each (scripts/fuzz.sh; longer: make fuzz) [$((SECONDS - t0)) s]"
	FUZZTIME="${FUZZTIME:-2s}" scripts/fuzz.sh
fi
# test/scale alone: its bursts check that every call is answered in time,
# which other packages' load tests (1,000 durable operations over three
# gateways) would contend with on a 2-core machine. Its concurrency tests
# (10,000-call bursts over three gateways, replicas on one topic,
# partitions) run with -race; its volume tests (200 calls x 2,000 chunks,
# 100,000-chunk streams: some 3 million messages) without: the race
# detector multiplies each message's CPU cost (480 s for the package with
# it, 113 s without), so those tests would load the detector rather than
# the gateway; the same paths (chunked answers, stream credit) run under
# -race in test/e2e (TestThousandChunkStream) and internal/bridge.
scale_race='^(TestBurstsAnswered|TestReplyToAtScale|TestMixedReplicasOneTopic|TestPartitionedRequestTopics)$'
echo "==> go test -race ./test/scale, concurrency (3 gateways, 10,000-call bursts; alone) [$((SECONDS - t0)) s]"
go test -race -count=1 -timeout 15m "${gotest_flags[@]}" -run "$scale_race" ./test/scale
echo "==> go test ./test/scale, volume (chunked bursts, long streams under CPU load; alone) [$((SECONDS - t0)) s]"
go test -count=1 -timeout 15m "${gotest_flags[@]}" -skip "$scale_race" ./test/scale
echo "==> go test ./test/restart (a broker of its own, stopped and restarted under load) [$((SECONDS - t0)) s]"
go test -count=1 -timeout 10m "${gotest_flags[@]}" ./test/restart
# test/shutdown alone and without the race detector too: it stops a broker
# of its own under two gateways and an SDK service, then SIGTERMs them.
echo "==> go test ./test/shutdown (a broker of its own stopped; gateways and a service told to stop meanwhile) [$((SECONDS - t0)) s]"
go test -count=1 -timeout 10m "${gotest_flags[@]}" ./test/shutdown
# test/cluster too runs without the race detector, for the same reason: it
# kills a broker under load.
echo "==> go test ./test/cluster (a cluster of its own: two brokers, one moved from and one killed under load) [$((SECONDS - t0)) s]"
go test -count=1 -timeout 15m "${gotest_flags[@]}" ./test/cluster
echo "==> scripts/run-check.sh (make run on ports of its own reaches only its own broker) [$((SECONDS - t0)) s]"
scripts/run-check.sh
echo "==> all tests passed in $((SECONDS - t0)) s"
