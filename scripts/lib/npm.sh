# shellcheck shell=bash
# Pinned npm packages for the tests, shared by scripts/npm-tools.sh and
# scripts/mcp-clients.sh. Source scripts/lib/common.sh first.
#
#   npm_pinned NAME ARG CHECK...
#
# installs the exact versions of scripts/NAME/package.json and its lock
# with `npm ci` under $CACHE_ROOT/NAME — again only when one of the two
# files changed, under a lock — fails unless every CHECK (a path under
# that directory) exists afterwards, and prints the directory unless ARG
# (the script's first argument) is "install". Progress goes to stderr.

npm_pinned() {
	local name="$1" arg="$2"
	shift 2
	NPM_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/$name"
	cache_dir "$name"
	NPM_DIR="$CACHE"
	local cmd
	for cmd in node npm; do
		command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' is required and not on PATH"
	done
	with_lock "$CACHE_ROOT/.$name.lock" npm_install "$@"
	if [[ "$arg" != "install" ]]; then
		echo "$NPM_DIR"
	fi
}

# npm_install CHECK...: the install itself, for npm_pinned.
npm_install() {
	local stamp="$NPM_DIR/.toolgate-stamp" want check
	want="$(cat "$NPM_SRC/package.json" "$NPM_SRC/package-lock.json" | sha256sum | cut -d' ' -f1)"
	if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$NPM_DIR/node_modules" ]]; then
		return 0
	fi
	log "installing into $NPM_DIR…"
	rm -rf "$NPM_DIR/node_modules" "$stamp"
	cp "$NPM_SRC/package.json" "$NPM_SRC/package-lock.json" "$NPM_DIR/"
	(cd "$NPM_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
	for check in "$@"; do
		[[ -e "$NPM_DIR/$check" ]] || die "$check missing after npm ci"
	done
	echo "$want" >"$stamp"
	log "ready"
}
