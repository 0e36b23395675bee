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
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/npm.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/npm.sh"
npm_pinned mcp-clients "${1:-}" node_modules/@modelcontextprotocol/client/package.json node_modules/@modelcontextprotocol/sdk/package.json
