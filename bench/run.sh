#!/usr/bin/env bash
# The toolgate benchmark: the gateway against the direct Pulsar
# round trip and TrustGraph's Python client, side by side, on this machine.
#
#   bench/run.sh            full run → .cache/bench/full/ (latest.json with the
#                           raw samples, pprof profiles and listings), then
#                           published: latest.md, latest.png, summary.json
#                           (aggregates and ratios), scale.{md,json} copied
#                           to docs/benchmarks/ — what the repository keeps
#   bench/run.sh --quick    development run, about 2 minutes → .cache/bench/quick/
#   bench/run.sh [--quick] [benchrun flags...]   e.g. -reps 5 -duration 20s -note "quiet machine"
#
# It uses the Pulsar broker already running on 127.0.0.1 (scripts/pulsar.sh
# status), or starts one and stops it again at the end; prepares the venv
# (scripts/pyenv.sh) plus bench/requirements.txt (matplotlib) in it; builds
# bin/gateway, bin/echo-service and bin/loadgen (and bench/cmd/floorgw, the
# floor); then runs bench/cmd/benchrun, which starts the gateway, the floor
# and two echo services as separate processes on topics of their own
# (bench-echo-<random>-…) and ports free at the time, and draws the plot.
# For the rest-quota-redis mode (quotas counted in Redis) benchrun starts a
# Redis on a free port through scripts/redis.sh (which installs Debian's
# redis-server when none is found) and stops it at the end.
#
# Environment: GO (go binary); the broker is PULSAR_BROKER_PORT and
# PULSAR_WEB_PORT on 127.0.0.1 (defaults 6650 and 8080), the same variables
# scripts/pulsar.sh starts it with, and benchrun is given the URLs made from
# them. TOOLGATE_PULSAR_URL and TOOLGATE_PULSAR_ADMIN_URL, if set, must name
# the same broker (or, alone, give the ports).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
T0=$SECONDS

log() { echo "bench: $*" >&2; }

QUICK=()
OUT="$ROOT/.cache/bench/full"
PUBLISH="$ROOT/docs/benchmarks"
if [[ "${1:-}" == "--quick" ]]; then
	QUICK=(-quick)
	OUT="$ROOT/.cache/bench/quick"
	PUBLISH=""
	shift
fi

WORK="$(mktemp -d -t toolgate-bench-build-XXXXXX)"
STARTED_PULSAR=0
cleanup() {
	rm -rf "$WORK"
	if [[ "$STARTED_PULSAR" == 1 ]]; then
		log "stopping the broker this script started"
		scripts/pulsar.sh down || true
	fi
}
trap cleanup EXIT

# 0. one broker, named by the same variables for scripts/pulsar.sh and benchrun
port_of() { # port of a URL like scheme://host:port[/...]
	local rest="${1#*://}"
	rest="${rest%%/*}"
	if [[ "$rest" == *:* ]]; then echo "${rest##*:}"; fi
}
export PULSAR_BROKER_PORT="${PULSAR_BROKER_PORT:-$(port_of "${TOOLGATE_PULSAR_URL:-}")}"
export PULSAR_WEB_PORT="${PULSAR_WEB_PORT:-$(port_of "${TOOLGATE_PULSAR_ADMIN_URL:-}")}"
export PULSAR_BROKER_PORT="${PULSAR_BROKER_PORT:-6650}" PULSAR_WEB_PORT="${PULSAR_WEB_PORT:-8080}"
want_url="pulsar://127.0.0.1:$PULSAR_BROKER_PORT"
want_admin="http://127.0.0.1:$PULSAR_WEB_PORT"
for pair in "TOOLGATE_PULSAR_URL=$want_url" "TOOLGATE_PULSAR_ADMIN_URL=$want_admin"; do
	var="${pair%%=*}" want="${pair#*=}"
	have="${!var:-}"
	if [[ -n "$have" && "$(port_of "$have")" != "$(port_of "$want")" ]]; then
		log "ERROR: $var=$have is not the broker of PULSAR_BROKER_PORT/PULSAR_WEB_PORT ($want): set one or make them agree"
		exit 2
	fi
done
export TOOLGATE_PULSAR_URL="$want_url" TOOLGATE_PULSAR_ADMIN_URL="$want_admin"
log "broker $TOOLGATE_PULSAR_URL, admin $TOOLGATE_PULSAR_ADMIN_URL"

# 1. the broker
if scripts/pulsar.sh status 2>/dev/null; then
	scripts/pulsar.sh ensure-ns
else
	log "no broker running: starting one (stopped again at the end)"
	STARTED_PULSAR=1
	scripts/pulsar.sh up
fi

# 2. Python: TrustGraph's client (scripts/pyenv.sh) and matplotlib for the plot
PY="$(scripts/pyenv.sh python)"
VENV="$(dirname "$(dirname "$PY")")"
want="$({ "$PY" -c 'import sys; print(sys.version_info[:2])'; cat bench/requirements.txt; } | sha256sum | cut -d' ' -f1)"
stamp="$VENV/.toolgate-bench-requirements.sha256"
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]]; then
	log "installing bench/requirements.txt (matplotlib) into $VENV"
	(
		# the lock scripts/pyenv.sh takes, so parallel installs do not collide
		exec 9>"$VENV/../.venv.lock"
		flock 9
		PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "$PY" -m pip install -q -r bench/requirements.txt >&2
		"$PY" -c 'import matplotlib' >&2
		echo "$want" >"$stamp"
	)
fi

# 3. binaries
mkdir -p bin
"$GO" build -o bin/ ./cmd/gateway ./cmd/echo-service
# bench/ is a Go module of its own (bench/go.mod), built from its directory
"$GO" -C bench build -o "$ROOT/bin/" ./cmd/loadgen
"$GO" -C bench build -o "$WORK/" ./cmd/benchrun ./cmd/gatewayprof ./cmd/floorgw

# 4. the matrix, then the plot
mkdir -p "$OUT"
if [[ -n "$PUBLISH" ]]; then
	# the report links the reading guide when it sits beside it; a
	# cluster-only run merges into the last scale.json
	cp "$PUBLISH/ANALYSIS.md" "$OUT/ANALYSIS.md"
	if [[ ! -f "$OUT/scale.json" && -f "$PUBLISH/scale.json" ]]; then cp "$PUBLISH/scale.json" "$OUT/scale.json"; fi
fi
"$WORK/benchrun" "${QUICK[@]}" -repo "$ROOT" -bin "$ROOT/bin" -gatewayprof "$WORK/gatewayprof" -floor "$WORK/floorgw" \
	-pulsar-url "$TOOLGATE_PULSAR_URL" -admin-url "$TOOLGATE_PULSAR_ADMIN_URL" -python "$PY" -pyload "$ROOT/bench/python/tg_load.py" -out "$OUT" "$@"
"$PY" bench/plot.py "$OUT/latest.json" "$OUT/latest.png"
if [[ -n "$PUBLISH" ]]; then
	# 5. what the repository keeps: the report, the plot, the aggregates
	for f in latest.md latest.png summary.json scale.md scale.json; do
		if [[ -f "$OUT/$f" ]]; then cp "$OUT/$f" "$PUBLISH/$f"; fi
	done
	log "published latest.md, latest.png, summary.json (and scale.*) to $PUBLISH; raw samples and profiles stay in $OUT"
fi
log "done in $((SECONDS - T0)) s: $OUT/latest.md"
