#!/usr/bin/env bash
# The npm packages the TypeScript client tests use, pinned: the exact
# versions (and lock) of scripts/npm-tools/package.json — openapi-typescript,
# openapi-fetch, typescript, axios — installed with `npm ci` under
# ${TOOLGATE_CACHE:-<repo>/.cache}/npm-tools on first use.
#
#   scripts/npm-tools.sh          install if needed; print the directory that
#                                 holds node_modules/
#   scripts/npm-tools.sh install  install only
#
# Needs node and npm. Progress goes to stderr; stdout carries only the path.
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/npm-tools"
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cache_dir npm-tools
DIR="$CACHE"
STAMP="$DIR/.toolgate-stamp"

for cmd in node npm; do
	command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' is required and not on PATH"
done

want_hash() {
	cat "$SRC/package.json" "$SRC/package-lock.json" | sha256sum | cut -d' ' -f1
}

install() {
	local want
	want="$(want_hash)"
	if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -d "$DIR/node_modules" ]]; then
		return 0
	fi
	log "installing into $DIR…"
	rm -rf "$DIR/node_modules" "$STAMP"
	cp "$SRC/package.json" "$SRC/package-lock.json" "$DIR/"
	(cd "$DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
	for bin in openapi-typescript tsc; do
		[[ -x "$DIR/node_modules/.bin/$bin" ]] || die "$bin missing after npm ci"
	done
	echo "$want" >"$STAMP"
	log "npm tools ready"
}

with_lock "$CACHE_ROOT/.npm-tools.lock" install
if [[ "${1:-}" != "install" ]]; then
	echo "$DIR"
fi
