#!/usr/bin/env bash
# Regenerates gen/ (Go code: messages, gRPC, grpc-gateway) and api/openapi/
# (OpenAPI spec) from proto/, reproducibly: buf and every generator are Go
# tools pinned in tools/buf/go.mod and tools/go.mod.
#
#   scripts/generate.sh
set -euo pipefail

cd "$(dirname "$0")/.."

buf() { go tool -modfile=tools/buf/go.mod buf "$@"; }

echo "==> fetching google/api protos into third_party/googleapis"
scripts/googleapis.sh

echo "==> building code generators (first run takes minutes)…"
# Build (or find in the Go build cache) every tool up front, so a slow first
# build shows here and not as a long silence inside buf.
go tool -modfile=tools/buf/go.mod -n buf >/dev/null
for gen in protoc-gen-go protoc-gen-go-grpc protoc-gen-grpc-gateway protoc-gen-openapiv2; do
	go tool -modfile=tools/go.mod -n "$gen" >/dev/null
done

echo "==> buf format check"
buf format --diff --exit-code proto

echo "==> buf lint"
buf lint

echo "==> buf generate proto"
buf generate proto

echo "==> done: gen/ and api/openapi/ are up to date"
