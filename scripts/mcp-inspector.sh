#!/usr/bin/env bash
# The MCP Inspector (npm @modelcontextprotocol/inspector, pinned), a second
# real MCP client for the tests of the gateway's /mcp endpoint.
#
# Usage:
#   scripts/mcp-inspector.sh          ensure it is installed; print the path of its launcher
#   scripts/mcp-inspector.sh ARGS...  ensure it is installed; run it with ARGS, e.g.
#       scripts/mcp-inspector.sh --cli http://127.0.0.1:8081/mcp --method tools/list
#
# Location: ${TOOLGATE_CACHE:-<repo>/.cache}/mcp-inspector (npm install
# --prefix there). Needs node and npm. Progress goes to stderr.
set -euo pipefail

VERSION=2.12.0
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cache_dir mcp-inspector
DIR="$CACHE"
LAUNCHER="$DIR/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
STAMP="$DIR/.toolgate-version"

install() {
	if [[ -f "$LAUNCHER" && -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
		return 0
	fi
	command -v npm >/dev/null 2>&1 || die "npm is required (apt-get install npm)"
	log "installing @modelcontextprotocol/inspector@$VERSION into $DIR..."
	mkdir -p "$DIR"
	rm -f "$STAMP"
	[[ -f "$DIR/package.json" ]] || echo '{"private": true}' >"$DIR/package.json"
	npm install --prefix "$DIR" --no-audit --no-fund --save-exact --loglevel=error \
		"@modelcontextprotocol/inspector@$VERSION" >&2
	[[ -f "$LAUNCHER" ]] || die "installed, but $LAUNCHER is missing"
	echo "$VERSION" >"$STAMP"
}

with_lock "$CACHE_ROOT/.mcp-inspector.lock" install
if [[ $# -eq 0 ]]; then
	echo "$LAUNCHER"
else
	exec node "$LAUNCHER" "$@"
fi
