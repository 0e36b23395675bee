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
# shellcheck source=scripts/lib/npm.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/npm.sh"
LAUNCHER=node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js
npm_single mcp-inspector @modelcontextprotocol/inspector "$VERSION" "$LAUNCHER"
LAUNCHER="$NPM_DIR/$LAUNCHER"

if [[ $# -eq 0 ]]; then
	echo "$LAUNCHER"
else
	exec node "$LAUNCHER" "$@"
fi
