#!/usr/bin/env bash
# The MCP TypeScript SDKs the client tests run, pinned: the exact
# versions (and lock) of scripts/mcp-clients/package.json —
# @modelcontextprotocol/client (v2) and @modelcontextprotocol/sdk (1.x) —
# installed with `npm ci` under
# ${TOOLGATE_CACHE:-<repo>/.cache}/mcp-clients on first use.
#
#   scripts/mcp-clients.sh          install if needed; print the directory that
#                                 holds node_modules/
#   scripts/mcp-clients.sh install  install only
#
# Needs node and npm. Progress goes to stderr; stdout carries only the path.
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/mcp-clients"
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cache_dir mcp-clients
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
	for pkg in @modelcontextprotocol/client @modelcontextprotocol/sdk; do
		[[ -f "$DIR/node_modules/$pkg/package.json" ]] || die "$pkg missing after npm ci"
	done
	echo "$want" >"$STAMP"
	log "MCP clients ready"
}

with_lock "$CACHE_ROOT/.mcp-clients.lock" install
if [[ "${1:-}" != "install" ]]; then
	echo "$DIR"
fi
