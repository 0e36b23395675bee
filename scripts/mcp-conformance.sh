#!/usr/bin/env bash
# The official MCP conformance suite (npm @modelcontextprotocol/conformance,
# pinned), run with the Node of scripts/node.sh (it needs Node ≥ 22).
#
#   scripts/mcp-conformance.sh          install if needed; print the path of its entry point
#   scripts/mcp-conformance.sh ARGS...  install if needed; run it with ARGS, e.g.
#       scripts/mcp-conformance.sh server --url http://127.0.0.1:8081/mcp --spec-version 2026-07-28
#
# Location: ${TOOLGATE_CACHE:-<repo>/.cache}/mcp-conformance. Needs npm.
# Progress goes to stderr.
set -euo pipefail

VERSION=0.2.0-alpha.12
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$HERE/lib/common.sh"
cache_dir mcp-conformance
DIR="$CACHE"
ENTRY="$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"
STAMP="$DIR/.toolgate-version"

NODE="$("$HERE/node.sh")"

install() {
	if [[ -f "$ENTRY" && -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
		return 0
	fi
	command -v npm >/dev/null 2>&1 || die "npm is required (apt-get install npm)"
	log "installing @modelcontextprotocol/conformance@$VERSION into $DIR..."
	rm -f "$STAMP"
	[[ -f "$DIR/package.json" ]] || echo '{"private": true}' >"$DIR/package.json"
	# npm runs with the pinned Node first on PATH: the suite's packages ask for Node ≥ 22.
	PATH="$(dirname "$NODE"):$PATH" npm install --prefix "$DIR" --no-audit --no-fund --save-exact \
		--ignore-scripts --loglevel=error "@modelcontextprotocol/conformance@$VERSION" >&2
	[[ -f "$ENTRY" ]] || die "installed, but $ENTRY is missing"
	echo "$VERSION" >"$STAMP"
}

with_lock "$CACHE_ROOT/.mcp-conformance.lock" install
if [[ $# -eq 0 ]]; then
	echo "$ENTRY"
else
	exec "$NODE" "$ENTRY" "$@"
fi
