#!/usr/bin/env bash
# Measure what changes did to the gateway: build cmd/gateway at each given
# commit, run the same short benchmark for each build in turn (the echo
# service, load generator and broker stay those of the working tree), repeat
# the rounds, and print one table of medians. Ratios to `direct` within a run
# cancel most of the machine's drift between runs.
#
#   bench/ab.sh [-rounds N] [-args 'BENCHRUN FLAGS'] NAME=COMMIT [NAME=COMMIT ...]
#   e.g. bench/ab.sh -rounds 2 before=HEAD~3 after=HEAD
#        bench/ab.sh -rounds 4 -args '-streams only -stream-reps 2' before=HEAD~3 after=HEAD
#
# -args replaces the benchmark's flags (default: -quick -reps 3 -duration 3s
# -modes direct,grpc,rest -concurrency 16,64). The builds take turns, their
# order reversed every other round (A B, B A, A B …), so that drift of the
# machine falls on each alike.
# Output: .cache/bench/ab/<name>-<round>/latest.json and the tables on stdout
# (unary calls, and streams when measured).
# It needs the broker running (scripts/pulsar.sh up; PULSAR_BROKER_PORT and
# PULSAR_WEB_PORT name it, as for that script) and takes about 1.5 min per
# build and round.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
ROUNDS=2
ARGS="-quick -reps 3 -duration 3s -modes direct,grpc,rest -concurrency 16,64"
while [[ "${1:-}" == -* ]]; do
	case "$1" in
	-rounds) ROUNDS="$2" ;;
	-args) ARGS="$2" ;;
	*) echo "ab: unknown flag $1" >&2; exit 2 ;;
	esac
	shift 2
done
if [[ $# -lt 1 ]]; then sed -n '2,19p' "$0"; exit 2; fi
read -r -a BENCH_ARGS <<<"$ARGS"
scripts/pulsar.sh status >/dev/null || { echo "ab: no broker running: scripts/pulsar.sh up" >&2; exit 1; }
OUT="$ROOT/.cache/bench/ab"
WORK="$(mktemp -d -t toolgate-ab-XXXXXX)"
trap 'git worktree prune; rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

"$GO" build -o "$WORK/tools/" ./cmd/echo-service
"$GO" -C bench build -o "$WORK/tools/" ./cmd/benchrun ./cmd/loadgen ./cmd/floorgw # bench/ is a module of its own
names=()
for v in "$@"; do
	name=${v%%=*} commit=${v#*=}
	[[ "$name" != "$v" && -n "$name" && -n "$commit" ]] || { echo "ab: want NAME=COMMIT, got $v" >&2; exit 2; }
	echo "ab: building the gateway at $commit as $name" >&2
	git worktree add -f -q --detach "$WORK/src-$name" "$commit"
	(cd "$WORK/src-$name" && "$GO" build -o "$WORK/$name/gateway" ./cmd/gateway)
	git worktree remove --force "$WORK/src-$name"
	cp "$WORK/tools/echo-service" "$WORK/tools/loadgen" "$WORK/tools/floorgw" "$WORK/$name/"
	rm -rf "$OUT/$name"-* # an earlier run's rounds are not this one's
	names+=("$name")
done
for ((r = 1; r <= ROUNDS; r++)); do
	order=("${names[@]}")
	if ((r % 2 == 0)); then # A B, B A, A B …: neither build always goes first
		order=()
		for ((i = ${#names[@]} - 1; i >= 0; i--)); do order+=("${names[i]}"); done
	fi
	for name in "${order[@]}"; do
		echo "ab: round $r/$ROUNDS: $name" >&2
		rm -rf "$OUT/$name-$r"
		"$WORK/tools/benchrun" "${BENCH_ARGS[@]}" \
			-pulsar-url "pulsar://127.0.0.1:${PULSAR_BROKER_PORT:-6650}" -admin-url "http://127.0.0.1:${PULSAR_WEB_PORT:-8080}" \
			-repo "$ROOT" -bin "$WORK/$name" -out "$OUT/$name-$r" >"$OUT/$name-$r.log" 2>&1 ||
			{ echo "ab: $name round $r failed; see $OUT/$name-$r.log" >&2; exit 1; }
	done
done
python3 bench/ab_table.py "$OUT" "${names[@]}"
