#!/usr/bin/env bash
# `make lint`: fail when git tracks a file over the size limit (a build
# output or a download committed by mistake). Benchmark runs keep their
# raw samples and profiles in .cache/bench/ (bench/run.sh): no file is
# exempt. Limit in bytes: BIGFILE_LIMIT (default 2 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
limit="${BIGFILE_LIMIT:-2097152}"
big=$(git ls-files -z | xargs -0 -r stat -c $'%s\t%n' 2>/dev/null |
	awk -F'\t' -v limit="$limit" '$1 > limit {printf "  %s (%d bytes)\n", $2, $1}')
if [[ -n "$big" ]]; then
	echo "tracked files over $limit bytes (build outputs or downloads? remove them and add them to .gitignore):" >&2
	echo "$big" >&2
	exit 1
fi
