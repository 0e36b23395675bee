#!/usr/bin/env bash
# Prometheus and promtool for the monitoring tests (deploy/monitoring_test.go,
# test/e2e/monitoring_test.go). Installs Debian's `prometheus` package when
# either is missing, then prints the path asked for on stdout (progress goes
# to stderr).
#
# Usage:
#   scripts/prometheus.sh            ensure both are installed; print prometheus's path
#   scripts/prometheus.sh promtool   the same; print promtool's path
#
# $TOOLGATE_PROMETHEUS and $TOOLGATE_PROMTOOL, when set to executables, are
# used as they are. The package's service is not started: the tests run
# Prometheus themselves, on ports of their own.
set -euo pipefail

log() { echo "prometheus: $*" >&2; }

find_bin() { # $1 = prometheus|promtool
	local var="TOOLGATE_${1^^}"
	if [[ -n "${!var:-}" && -x "${!var}" ]]; then
		echo "${!var}"
		return 0
	fi
	command -v "$1" 2>/dev/null
}

what="${1:-prometheus}"
case "$what" in
prometheus | promtool) ;;
*)
	echo "usage: $0 [prometheus|promtool]" >&2
	exit 2
	;;
esac

if find_bin prometheus >/dev/null && find_bin promtool >/dev/null; then
	find_bin "$what"
	exit 0
fi
sudo=()
if [[ $(id -u) != 0 ]]; then
	sudo=(sudo)
fi
log "installing Debian's prometheus package (prometheus, promtool)"
"${sudo[@]}" apt-get update >&2
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends prometheus >&2
if ! find_bin "$what"; then
	log "apt-get installed prometheus, but no $what is on PATH"
	exit 1
fi
