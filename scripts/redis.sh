#!/usr/bin/env bash
# A real Redis server for the quota tests (internal/quota, test/e2e): installs
# Debian's redis-server package when none is found, then starts, waits for and
# stops a server on 127.0.0.1 that keeps nothing on disk.
#
#   scripts/redis.sh up       start (or reuse) a server on REDIS_PORT; wait until it
#                             answers PING; print its URL (redis://127.0.0.1:PORT) on stdout
#   scripts/redis.sh down     stop the server started by this script on REDIS_PORT
#   scripts/redis.sh status   exit 0 if a Redis server answers PING on REDIS_PORT
#   scripts/redis.sh path     install redis-server when missing; print its path on stdout
#
# Environment:
#   TOOLGATE_CACHE        cache root (default <repo>/.cache); files live in $TOOLGATE_CACHE/redis
#   TOOLGATE_REDIS_SERVER the redis-server binary to use (default: on PATH, installed when missing)
#   REDIS_PORT            port (default: 6379, or when something that is not Redis holds it, the first
#                         of 6380-6399 that is free or answers as Redis); given, a port held by something
#                         that is not Redis is an error. `up` prints the URL: `down` wants the same REDIS_PORT
#   REDIS_START_TIMEOUT   seconds to wait for the first PONG (default 30)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib/daemon.sh
source "$SCRIPT_DIR/lib/daemon.sh"
cache_dir redis

PORT="${REDIS_PORT:-6379}"
START_TIMEOUT="${REDIS_START_TIMEOUT:-30}"
for v in PORT START_TIMEOUT; do
	[[ "${!v}" =~ ^[0-9]+$ ]] || die "REDIS_$v must be a number, got '${!v}'"
done
DAEMON_WHAT="redis-server"
DAEMON_ERRORS='# (Failed|Could not|Can.t)'
# one server per port
use_port() {
	PORT="$1"
	daemon_files redis "$PORT" 6379 'redis-server'
}
use_port "$PORT"

find_server() {
	if [[ -n "${TOOLGATE_REDIS_SERVER:-}" && -x "$TOOLGATE_REDIS_SERVER" ]]; then
		echo "$TOOLGATE_REDIS_SERVER"
		return 0
	fi
	command -v redis-server 2>/dev/null
}

# server_path: redis-server's path, installing Debian's package when missing.
server_path() {
	local path
	if path="$(find_server)"; then
		echo "$path"
		return 0
	fi
	local sudo=()
	[[ $(id -u) == 0 ]] || sudo=(sudo)
	log "installing Debian's redis-server package"
	"${sudo[@]}" apt-get update >&2
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends redis-server >&2
	path="$(find_server)" || die "apt-get installed redis-server, but no redis-server is on PATH"
	echo "$path"
}

# answers: a Redis server on PORT replies +PONG to PING.
answers() {
	listening "$PORT" || return 1
	local reply
	reply="$(timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"; printf "PING\r\n" >&3; head -c 7 <&3' "$PORT" 2>/dev/null)" || return 1
	[[ "$reply" == "+PONG"* ]]
}

# choose_port: without REDIS_PORT, the first port of 6379-6399 that is free,
# or where a Redis server answers.
choose_port() {
	[[ -z "${REDIS_PORT:-}" ]] || return 0
	local p
	for p in 6379 $(seq 6380 6399); do
		use_port "$p"
		if answers || ! port_taken "$p"; then
			return 0
		fi
	done
	die "6379-6399 are all taken by something that is not Redis: set REDIS_PORT to a free port"
}

cmd_up() {
	choose_port
	take_lock
	local pid server
	if pid="$(our_pid)"; then
		log "redis-server started by this script is running (pid $pid); waiting for PONG"
	elif answers; then
		log "a Redis server already answers on 127.0.0.1:$PORT (not started by this script)"
		echo "redis://127.0.0.1:$PORT"
		return 0
	else
		port_taken "$PORT" && die "127.0.0.1:$PORT is taken by something that is not Redis: set REDIS_PORT to a free port"
		server="$(server_path)"
		log "starting $server on 127.0.0.1:$PORT (no persistence)"
		pid="$(start_detached "$CACHE" redis-server "$server" --bind 127.0.0.1 --port "$PORT" \
			--save '' --appendonly no --protected-mode yes --daemonize no --dir "$CACHE")"
	fi
	wait_ready "$pid" "$START_TIMEOUT" answers || die "redis-server (pid $pid) did not answer PING within ${START_TIMEOUT}s"
	log "ready on 127.0.0.1:$PORT (pid $pid)"
	echo "redis://127.0.0.1:$PORT"
}

case "${1:-}" in
up) cmd_up ;;
down) daemon_down "127.0.0.1:$PORT" 10 answers ;;
status) daemon_status "127.0.0.1:$PORT" answers ;;
path) server_path ;;
*)
	echo "usage: $0 up|down|status|path" >&2
	exit 2
	;;
esac
