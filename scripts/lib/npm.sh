# shellcheck shell=bash
# Pinned npm packages for the tests: npm_pinned installs a package.json and its
# lock (npm-tools.sh, mcp-clients.sh), npm_single one package (node.sh,
# mcp-inspector.sh, mcp-conformance.sh). Source scripts/lib/common.sh first.
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

# npm_single NAME PACKAGE VERSION CHECK: installs the one npm PACKAGE at the
# exact VERSION under $CACHE_ROOT/NAME (npm install --prefix), again only
# when the version changed, under a lock, and fails unless CHECK (a path
# under that directory) exists afterwards. Sets NPM_DIR. With NPM_NODE set
# (a node binary), npm runs with that Node first on PATH, for packages that
# ask for a newer Node than the machine's.
npm_single() {
	local name="$1"
	cache_dir "$name"
	NPM_DIR="$CACHE"
	command -v npm >/dev/null 2>&1 || die "npm is required (apt-get install npm)"
	with_lock "$CACHE_ROOT/.$name.lock" npm_single_install "$2" "$3" "$4"
}

# npm_single_install PACKAGE VERSION CHECK: the install itself, for npm_single.
npm_single_install() {
	local pkg="$1" version="$2" check="$NPM_DIR/$3" stamp="$NPM_DIR/.toolgate-version" path="$PATH"
	if [[ -e "$check" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
		return 0
	fi
	log "installing $pkg@$version into $NPM_DIR..."
	rm -f "$stamp"
	[[ -f "$NPM_DIR/package.json" ]] || echo '{"private": true}' >"$NPM_DIR/package.json"
	if [[ -n "${NPM_NODE:-}" ]]; then
		path="$(dirname "$NPM_NODE"):$PATH"
	fi
	PATH="$path" npm install --prefix "$NPM_DIR" --no-audit --no-fund --save-exact \
		--ignore-scripts --loglevel=error "$pkg@$version" >&2
	[[ -e "$check" ]] || die "installed, but $check is missing"
	echo "$version" >"$stamp"
}
