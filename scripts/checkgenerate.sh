#!/usr/bin/env bash
# Fails when the committed generated code is stale: regenerates gen/,
# api/openapi/ and test/e2e/oapiclient/ with scripts/generate.sh, then checks that git sees no change
# there — no modified, deleted or new (untracked) file. Meant for CI and
# pre-commit, on a checkout where the generated files are committed.
#
# Leaves the regenerated files in place (so a failure can be fixed by
# committing them) and does not touch the git index.
set -euo pipefail

cd "$(dirname "$0")/.."

paths=(gen api/openapi test/e2e/oapiclient)

scripts/generate.sh

# --porcelain lists modified (M), deleted (D) and untracked (??) files;
# --untracked-files=all names each new file, not just its directory.
changes=$(git status --porcelain --untracked-files=all -- "${paths[@]}")
if [[ -n "$changes" ]]; then
	echo >&2
	echo "checkgenerate: generated files are out of date; run scripts/generate.sh and commit:" >&2
	printf '%s\n' "$changes" >&2
	git --no-pager diff --stat -- "${paths[@]}" >&2 || true
	exit 1
fi
echo "checkgenerate: gen/, api/openapi/ and test/e2e/oapiclient/ match proto/"
