# shellcheck shell=bash
# Sourced by the scripts that keep something under the cache (.cache/, or
# $TOOLGATE_CACHE): the servers of scripts/lib/daemon.sh and the tools
# installed there (scripts/pyenv.sh, scripts/mcp-inspector.sh,
# scripts/openapi-generator.sh).
#
#   log MSG / die MSG      a message on stderr, prefixed with the script's name
#                          (die: as an error, then exit 1)
#   cache_dir NAME         CACHE_ROOT (absolute) and CACHE=$CACHE_ROOT/NAME, created
#   with_lock FILE CMD...  run CMD holding an exclusive lock on FILE

SELF="${0##*/}"

log() { echo "$SELF: $*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

# cache_dir NAME: the cache root ($TOOLGATE_CACHE, else <repo>/.cache) made
# absolute (Maven resolves relative paths against the pom's folder, and
# processes start in folders of their own), and its folder NAME, created.
cache_dir() {
	local repo
	repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
	CACHE_ROOT="${TOOLGATE_CACHE:-$repo/.cache}"
	mkdir -p "$CACHE_ROOT/$1"
	CACHE_ROOT="$(cd "$CACHE_ROOT" && pwd)"
	# shellcheck disable=SC2034 # for the sourcing script
	CACHE="$CACHE_ROOT/$1"
}

# with_lock FILE CMD...: run CMD while holding an exclusive flock on FILE
# (fd 9), so that concurrent callers (parallel test runs) install one copy
# after the other. Without flock on the machine, CMD runs unlocked.
with_lock() {
	local file="$1"
	shift
	if ! command -v flock >/dev/null 2>&1; then
		"$@"
		return
	fi
	exec 9>"$file"
	flock 9
	"$@"
	exec 9>&-
}
