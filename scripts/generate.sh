#!/usr/bin/env bash
# Regenerates gen/ (Go code: messages, gRPC, Connect, grpc-gateway), api/openapi/
# (the OpenAPI 2 document from protoc-gen-openapiv2 and the OpenAPI 3.1 one
# that internal/openapi31 makes of it) and test/e2e/oapiclient/ (a Go client
# of the 3.1 document, by oapi-codegen) from proto/, reproducibly: buf and
# every generator are Go tools pinned in tools/buf/go.mod and tools/go.mod.
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
for gen in protoc-gen-go protoc-gen-go-grpc protoc-gen-connect-go protoc-gen-grpc-gateway protoc-gen-openapiv2 oapi-codegen; do
	go tool -modfile=tools/go.mod -n "$gen" >/dev/null
done

echo "==> buf format check"
buf format --diff --exit-code proto

echo "==> buf lint"
buf lint

echo "==> buf generate proto"
buf generate proto

echo "==> OpenAPI 3.1: api/openapi/toolgate.openapi.json"
go run ./internal/openapi31/cmd/openapi31 \
	-in api/openapi/toolgate.swagger.json -out api/openapi/toolgate.openapi.json

echo "==> oapi-codegen: test/e2e/oapiclient/client.gen.go"
go tool -modfile=tools/go.mod oapi-codegen -config test/e2e/oapiclient/oapi-codegen.yaml \
	-o test/e2e/oapiclient/client.gen.go api/openapi/toolgate.openapi.json

echo "==> done: gen/, api/openapi/ and test/e2e/oapiclient/ are up to date"
