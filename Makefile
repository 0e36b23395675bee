# toolgate — see README.md.
SHELL := bash
GO    ?= go
# Build with the toolchain go.mod names (downloaded through the Go module
# proxy when the installed one is older): it carries the standard library's
# security fixes. A machine-wide GOTOOLCHAIN=local would otherwise pin the
# installed release.
export GOTOOLCHAIN := auto
# the Go files gofmt keeps in shape: tracked, generated code excepted
GOFILES = $(shell git ls-files '*.go' | grep -v '^gen/')

.PHONY: all help build test fuzz run pulsar-up pulsar-down generate checkgenerate breaking bench bench-quick lint fmt clean

all: build

## help: list the targets and what they do
help:
	@awk '/^## / { line = substr($$0, 4); i = index(line, ": "); printf "  %-25s %s\n", substr(line, 1, i - 1), substr(line, i + 2) }' $(MAKEFILE_LIST)

## build: compile every command into bin/
build:
	mkdir -p bin
	$(GO) build -o bin/ ./cmd/...

## test: every test against a real Pulsar broker (started and stopped when none runs)
test:
	scripts/test.sh

## fuzz: every fuzz target, FUZZTIME each (default 30s; make test runs each 2s); FUZZ=regexp picks targets
fuzz:
	FUZZTIME=$${FUZZTIME:-30s} scripts/fuzz.sh

## run: Pulsar, the example services and the gateway on 127.0.0.1; Ctrl-C stops them
run:
	scripts/run.sh

## pulsar-up / pulsar-down: the standalone broker alone
pulsar-up:
	scripts/pulsar.sh up

pulsar-down:
	scripts/pulsar.sh down

## cluster-up / cluster-down: a local Pulsar cluster (ZooKeeper, a bookie, two brokers on 26xxx); see docs/scaling.md
.PHONY: cluster-up cluster-down
cluster-up:
	scripts/pulsar-cluster.sh up

cluster-down:
	scripts/pulsar-cluster.sh down

## generate: regenerate gen/, api/openapi/ and test/e2e/oapiclient/ from proto/ with pinned tools
generate:
	scripts/generate.sh

## checkgenerate: fail when generated code is not what proto/ gives
checkgenerate:
	scripts/checkgenerate.sh

## breaking: fail when proto/ breaks compatibility with its first published version
breaking:
	scripts/breaking.sh $$(git rev-list --reverse HEAD -- proto | head -1)

## bench: gateway (gRPC, REST) vs direct Pulsar vs TrustGraph's Python client → .cache/bench/full/, the report, plot and aggregates published to docs/benchmarks/ (bench/ is a Go module of its own)
bench:
	bench/run.sh

## bench-quick: the same matrix in under 2 minutes, for development → .cache/bench/quick/
bench-quick:
	bench/run.sh --quick

## lint: no tracked file over 2 MB, gofmt, go vet, golangci-lint (.golangci.yml, import boundaries included), no core/door/middleware linking Pulsar, go.mod tidiness, govulncheck; the bench module (bench/go.mod) too
lint:
	scripts/bigfiles.sh
	GO=$(GO) scripts/linkcheck.sh
	@out=$$(gofmt -l $(GOFILES)); \
		if [[ -n "$$out" ]]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) -C bench vet ./...
	$(GO) tool -modfile=tools/lint/go.mod golangci-lint run ./...
	cd bench && $(GO) tool -modfile=../tools/lint/go.mod golangci-lint run ./...
	$(GO) mod tidy -diff
	cd bench && $(GO) mod tidy -diff
	cd tools && $(GO) mod tidy -diff
	cd tools/buf && $(GO) mod tidy -diff
	cd tools/lint && $(GO) mod tidy -diff
	cd tools/vuln && $(GO) mod tidy -diff
	cd tools/helm && $(GO) mod tidy -diff
	cd tools/image && $(GO) mod tidy -diff && $(GO) vet ./...
	scripts/vulncheck.sh

## fmt: gofmt every tracked Go file outside gen/ (what lint checks)
fmt:
	gofmt -w $(GOFILES)

## clean: remove bin/
clean:
	rm -rf bin

## image: the container image (gateway, echo-service, joke-service: static, non-root, empty base) → .cache/image/; see docs/deploy.md
.PHONY: image
image:
	deploy/image.sh
