#!/usr/bin/env bash
# Copies the googleapis protos that toolgate.proto imports (google/api/annotations.proto
# and google/api/http.proto; google/longrunning/operations.proto and what it imports)
# into third_party/googleapis/ (gitignored), where buf.yaml lists them as a second module.
#
# The buf schema registry is not reachable, so the files come from a Go module the Go
# module proxy serves: github.com/grpc-ecosystem/grpc-gateway@v1.16.0 vendors them under
# third_party/googleapis/. The version is pinned here; the go.sum checksum database
# verifies the download.
#
# google/longrunning/operations.proto is not in that module: it comes, with the
# google/api/client.proto and google/rpc/status.proto it imports, from
# github.com/gogo/googleapis@v1.4.1 (also pinned, also checked by the checksum database).
# That copy names go_packages like "longrunning"; each is rewritten to the Go package
# that registers the file's messages (see gopackage below; longrunningpb is a
# requirement of go.mod), so that generated code imports them.
#
# Idempotent: files already up to date are left alone. Fails loudly on any problem.
set -euo pipefail

cd "$(dirname "$0")/.."

DEST=third_party/googleapis

# gopackage FILE: the go_package a copied FILE gets, or nothing to keep its own.
gopackage() {
	case "$1" in
	google/longrunning/operations.proto) echo 'cloud.google.com/go/longrunning/autogen/longrunningpb;longrunningpb' ;;
	google/api/client.proto) echo 'google.golang.org/genproto/googleapis/api/annotations;annotations' ;;
	google/rpc/status.proto) echo 'google.golang.org/genproto/googleapis/rpc/status;status' ;;
	esac
}

# moddir MODULE@VERSION SUBDIR: the module's download directory (with SUBDIR in it).
moddir() {
	local json dir
	if ! json=$(go mod download -json "$1"); then
		echo "googleapis.sh: go mod download $1 failed" >&2
		return 1
	fi
	dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	if [[ -z "$dir" || ! -d "$dir/$2" ]]; then
		echo "googleapis.sh: no $2 in the download of $1:" >&2
		printf '%s\n' "$json" >&2
		return 1
	fi
	printf '%s\n' "$dir/$2"
}

# copy MODULE ROOT FILE...: each FILE of ROOT into $DEST, when it differs.
copy() {
	local module=$1 root=$2 f src dst tmp pkg
	shift 2
	for f in "$@"; do
		src="$root/$f"
		dst="$DEST/$f"
		if [[ ! -f "$src" ]]; then
			echo "googleapis.sh: $src is missing" >&2
			exit 1
		fi
		tmp=$(mktemp)
		pkg=$(gopackage "$f")
		if [[ -n "$pkg" ]]; then
			sed "s|^option go_package = .*;\$|option go_package = \"$pkg\";|" "$src" >"$tmp"
			if ! grep -qF "option go_package = \"$pkg\";" "$tmp"; then
				echo "googleapis.sh: could not set go_package in $f" >&2
				rm -f "$tmp"
				exit 1
			fi
		else
			cat "$src" >"$tmp"
		fi
		if [[ -f "$dst" ]] && cmp -s "$tmp" "$dst"; then
			rm -f "$tmp"
			continue
		fi
		mkdir -p "$(dirname "$dst")"
		# install, not cp: module cache files are read-only, the copies must not be.
		install -m 0644 "$tmp" "$dst"
		rm -f "$tmp"
		echo "googleapis.sh: copied $f from $module"
	done
}

SRC_MODULE=github.com/grpc-ecosystem/grpc-gateway@v1.16.0
root=$(moddir "$SRC_MODULE" third_party/googleapis)
copy "$SRC_MODULE" "$root" google/api/annotations.proto google/api/http.proto

LRO_MODULE=github.com/gogo/googleapis@v1.4.1
root=$(moddir "$LRO_MODULE" google)
copy "$LRO_MODULE" "${root%/google}" google/longrunning/operations.proto google/api/client.proto google/rpc/status.proto
