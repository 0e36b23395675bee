#!/usr/bin/env bash
# Runs openapi-generator, pinned: the npm wrapper
# @openapitools/openapi-generator-cli at the exact version (and lock) of
# scripts/openapi-generator/package.json, and the generator jar version of
# scripts/openapi-generator/openapitools.json, which the wrapper fetches from
# Maven Central. Both are installed under
# ${TOOLGATE_CACHE:-<repo>/.cache}/openapi-generator on first use.
#
#   scripts/openapi-generator.sh ARGS...    e.g. generate -i spec.json -g python -o out
#   scripts/openapi-generator.sh install    install only
#
# Needs node/npm and a JDK (java 11 or later). Progress goes to stderr.
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/openapi-generator"
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cache_dir openapi-generator
DIR="$CACHE"
STAMP="$DIR/.toolgate-stamp"

for cmd in node npm java; do
	command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' is required and not on PATH"
done

want_hash() {
	cat "$SRC/package.json" "$SRC/package-lock.json" "$SRC/openapitools.json" | sha256sum | cut -d' ' -f1
}

install() {
	local want
	want="$(want_hash)"
	if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$DIR/node_modules/.bin/openapi-generator-cli" ]]; then
		return 0
	fi
	log "installing into $DIR…"
	rm -rf "$DIR/node_modules" "$STAMP"
	mkdir -p "$DIR"
	cp "$SRC/package.json" "$SRC/package-lock.json" "$DIR/"
	(cd "$DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
	# The same configuration, with the jar kept beside the wrapper.
	node -e 'const fs = require("fs");
const c = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
c["generator-cli"].storageDir = process.argv[2];
fs.writeFileSync(process.argv[3], JSON.stringify(c, null, 2) + "\n");' \
		"$SRC/openapitools.json" "$DIR/jars" "$DIR/openapitools.json"
	local version want_version
	want_version="$(node -p 'require(process.argv[1])["generator-cli"].version' "$SRC/openapitools.json")"
	version="$(run version | tail -1)"
	[[ "$version" == "$want_version" ]] || die "expected generator $want_version, got '$version'"
	echo "$want" >"$STAMP"
	log "openapi-generator $version ready"
}

run() {
	(cd "$DIR" && "$DIR/node_modules/.bin/openapi-generator-cli" "$@")
}

with_lock "$CACHE_ROOT/.openapi-generator.lock" install

if [[ "${1:-}" == "install" ]]; then
	exit 0
fi
# The wrapper reads openapitools.json from its working directory; make the
# caller's relative paths absolute before changing to it.
args=()
expect_path=0
for a in "$@"; do
	if [[ $expect_path == 1 && "$a" != /* && "$a" != *://* ]]; then
		a="$PWD/$a"
	fi
	expect_path=0
	case "$a" in
	-i | --input-spec | -o | --output | -c | --config | -t | --template-dir) expect_path=1 ;;
	esac
	args+=("$a")
done
run "${args[@]}"
