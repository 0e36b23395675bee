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
# shellcheck source=scripts/lib/npm.sh
source "$HERE/lib/npm.sh"
# npm runs with the pinned Node first on PATH: the suite's packages ask for Node ≥ 22.
NODE="$("$HERE/node.sh")"
NPM_NODE="$NODE"
ENTRY=node_modules/@modelcontextprotocol/conformance/dist/index.js
npm_single mcp-conformance @modelcontextprotocol/conformance "$VERSION" "$ENTRY"
ENTRY="$NPM_DIR/$ENTRY"

if [[ $# -eq 0 ]]; then
	echo "$ENTRY"
else
	exec "$NODE" "$ENTRY" "$@"
fi
