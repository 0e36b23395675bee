#!/usr/bin/env bash
# `make image`: the container image of gateway, echo-service and joke-service
# (one image, the gateway its entrypoint), built without a container engine:
# static binaries (CGO_ENABLED=0, which also gives the Pulsar client its
# pure-Go zstd), packed by tools/image (go-containerregistry, pinned in
# tools/image/go.mod) onto an empty base.
#
#   .cache/image/oci/          OCI image layout (skopeo copy oci:…, crane push, …)
#   .cache/image/toolgate.tar  tarball for docker load / podman load / kind load image-archive
#
# Settings (environment): IMAGE_VERSION (default: git describe),
# IMAGE_REVISION (default: git rev-parse HEAD), IMAGE_ARCH
# (default: the Go toolchain's GOARCH), IMAGE_SOURCE, IMAGE_LICENSES (SPDX;
# NOASSERTION while the repository declares no licence), IMAGE_CA_BUNDLE
# (the build machine's CA certificates, installed for TLS to Pulsar and the
# OTLP collector), SOURCE_DATE_EPOCH (default: the last commit's time). The
# image and its files are dated SOURCE_DATE_EPOCH, so the same commit,
# toolchain and CA bundle give the same image digest. IMAGE_BIN names a folder of
# binaries built already (as above) to pack instead of building them.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/lib/common.sh
source scripts/lib/common.sh
cache_dir image
OUT="$CACHE"
GO="${GO:-go}"
# Build with the toolchain go.mod names, as the Makefile does: the image
# ships the standard library's security fixes.
export GOTOOLCHAIN=auto
VERSION="${IMAGE_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}"
ARCH="${IMAGE_ARCH:-$("$GO" env GOARCH)}"
CA="${IMAGE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
[[ -r "$CA" ]] || die "no CA bundle at $CA (Debian/Ubuntu: apt-get install ca-certificates; or set IMAGE_CA_BUNDLE)"

BIN="${IMAGE_BIN:-}"
if [[ -z "$BIN" ]]; then
	BIN="$OUT/bin"
	rm -rf "${BIN:?}"
	mkdir -p "$BIN"
	CGO_ENABLED=0 GOOS=linux GOARCH="$ARCH" "$GO" build -trimpath \
		-ldflags "-s -w -X github.com/toolgate/toolgate/internal/version.stamped=$VERSION" \
		-o "$BIN/" ./cmd/gateway ./cmd/echo-service ./cmd/joke-service
fi
"$GO" -C tools/image run . -bin "$BIN" -out "$OUT" -arch "$ARCH" \
	-version "$VERSION" -revision "${IMAGE_REVISION:-$(git rev-parse HEAD 2>/dev/null || true)}" \
	-source "${IMAGE_SOURCE:-https://github.com/toolgate/toolgate}" \
	-licenses "${IMAGE_LICENSES:-NOASSERTION}" \
	-ca-bundle "$CA" -created "${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
