#!/usr/bin/env bash
# Fails when proto/ breaks compatibility (FILE rules: field numbers, names,
# JSON names, RPCs) with an earlier commit, by default the previous one.
#
#   scripts/breaking.sh [git-ref]
set -euo pipefail
cd "$(dirname "$0")/.."
base="${1:-HEAD~1}"
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
	echo "breaking.sh: no commit $base to compare with; nothing to check"
	exit 0
fi
if ! git cat-file -e "$base:proto" 2>/dev/null; then
	echo "breaking.sh: $base has no proto/; nothing to check"
	exit 0
fi
scripts/googleapis.sh >/dev/null
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
git archive "$base" proto buf.yaml | tar -x -C "$tmp"
mkdir -p "$tmp/third_party"
cp -r third_party/googleapis "$tmp/third_party/"
echo "==> buf breaking proto against $base ($(git rev-parse --short "$base"))"
go tool -modfile=tools/buf/go.mod buf breaking proto --against "$tmp/proto"
