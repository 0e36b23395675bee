#!/usr/bin/env bash
# The npm packages the TypeScript client tests use, pinned: the exact
# versions (and lock) of scripts/npm-tools/package.json — openapi-typescript,
# openapi-fetch, typescript, axios, and Connect-ES (@connectrpc/connect,
# @connectrpc/connect-node, @bufbuild/protobuf) — installed with `npm ci` under
# ${TOOLGATE_CACHE:-<repo>/.cache}/npm-tools on first use.
#
#   scripts/npm-tools.sh          install if needed; print the directory that
#                                 holds node_modules/
#   scripts/npm-tools.sh install  install only
#
# Needs node and npm. Progress goes to stderr; stdout carries only the path.
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/npm.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/npm.sh"
npm_pinned npm-tools "${1:-}" node_modules/.bin/openapi-typescript node_modules/.bin/tsc
