#!/usr/bin/env bash
# Copies the googleapis protos that toolgate.proto imports (google/api/annotations.proto
# and google/api/http.proto) into third_party/googleapis/ (gitignored), where buf.yaml
# lists them as a second module.
#
# The buf schema registry is not reachable, so the files come from a Go module the Go
# module proxy serves: github.com/grpc-ecosystem/grpc-gateway@v1.16.0 vendors them under
# third_party/googleapis/. The version is pinned here; the go.sum checksum database
# verifies the download.
#
# Idempotent: files already up to date are left alone. Fails loudly on any problem.
set -euo pipefail

cd "$(dirname "$0")/.."

SRC_MODULE=github.com/grpc-ecosystem/grpc-gateway@v1.16.0
FILES=(google/api/annotations.proto google/api/http.proto)
DEST=third_party/googleapis

if ! json=$(go mod download -json "$SRC_MODULE"); then
	echo "googleapis.sh: go mod download $SRC_MODULE failed" >&2
	exit 1
fi
dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [[ -z "$dir" || ! -d "$dir/third_party/googleapis" ]]; then
	echo "googleapis.sh: no third_party/googleapis in the download of $SRC_MODULE:" >&2
	printf '%s\n' "$json" >&2
	exit 1
fi

for f in "${FILES[@]}"; do
	src="$dir/third_party/googleapis/$f"
	dst="$DEST/$f"
	if [[ ! -f "$src" ]]; then
		echo "googleapis.sh: $src is missing" >&2
		exit 1
	fi
	if [[ -f "$dst" ]] && cmp -s "$src" "$dst"; then
		continue
	fi
	mkdir -p "$(dirname "$dst")"
	# install, not cp: module cache files are read-only, the copies must not be.
	install -m 0644 "$src" "$dst"
	echo "googleapis.sh: copied $f from $SRC_MODULE"
done
