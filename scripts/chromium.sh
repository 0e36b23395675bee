#!/usr/bin/env bash
# Headless Chromium for the browser tests (test/e2e/docs_browser_test.go).
# Installs Debian's `chromium` package when no Chromium is found, then prints
# the browser's path on stdout (progress goes to stderr).
#
# Usage:
#   scripts/chromium.sh          ensure Chromium is installed; print its path
#   scripts/chromium.sh path     print its path only (exit 1 when missing)
#
# $TOOLGATE_CHROMIUM, when set to an executable, is used as is.
set -euo pipefail

log() { echo "chromium: $*" >&2; }

find_chromium() {
	if [[ -n "${TOOLGATE_CHROMIUM:-}" && -x "$TOOLGATE_CHROMIUM" ]]; then
		echo "$TOOLGATE_CHROMIUM"
		return 0
	fi
	local name
	for name in chromium chromium-browser google-chrome-stable google-chrome; do
		if command -v "$name" >/dev/null 2>&1; then
			command -v "$name"
			return 0
		fi
	done
	return 1
}

if path="$(find_chromium)"; then
	echo "$path"
	exit 0
fi
if [[ "${1:-}" == path ]]; then
	log "not installed"
	exit 1
fi

sudo=()
if [[ $(id -u) != 0 ]]; then
	sudo=(sudo)
fi
log "installing Debian's chromium package"
"${sudo[@]}" apt-get update >&2
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends chromium fonts-dejavu-core >&2
if ! path="$(find_chromium)"; then
	log "apt-get installed chromium, but no chromium executable is on PATH"
	exit 1
fi
echo "$path"
