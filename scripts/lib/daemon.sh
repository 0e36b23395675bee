# shellcheck shell=bash
# Sourced by scripts/pulsar.sh, scripts/cassandra.sh and scripts/configsvc.sh:
# running one long-lived server process for the project — started in a
# session of its own so that it outlives the script, recorded in a pid file
# under the cache, waited for until ready, stopped with SIGTERM and, past a
# grace period, SIGKILL. JVM-specific pieces are in scripts/lib/jvm.sh.
#
# A script sources this file (which brings scripts/lib/common.sh: log, die,
# cache_dir), then calls
#   cache_dir NAME                      CACHE_ROOT (absolute) and CACHE=$CACHE_ROOT/NAME
#   daemon_files BASE PORT DEFAULT PATTERN
#                                       SFX, PIDFILE, LOG, LOCK of the instance on PORT;
#                                       PATTERN (an ERE) is what the process's command
#                                       line must contain to be ours
# and sets
#   DAEMON_WHAT         what it runs, as its messages name it ("the Pulsar broker")
#   DAEMON_FAILED       optional ERE: a log line saying the start failed although
#                       the process lives on (a JVM's non-daemon threads)
#   DAEMON_ERRORS       optional ERE: log lines worth showing first when a start fails
#   DAEMON_NOISE        optional ERE: lines of those that are not worth it
#   DAEMON_AFTER_EXIT   optional command, called with 1 when the process ended by
#                       itself after SIGTERM and 0 when it had to be killed or died
#                       starting (scripts/lib/jvm.sh's cds_finish)
#
# and uses
#   listening PORT                something listens on PORT (not connecting)
#   port_answers PORT             a connection to PORT is accepted
#   port_taken PORT               a server could not bind PORT now
#   take_lock                     serialise up/down of one instance (fd 9)
#   our_pid                       the pid of the process this script started, if alive
#   data_dir KEPT KEY             where a start keeps its data
#   start_detached DIR WHAT CMD…  start CMD in DIR, outside this script's session; print its pid
#   wait_ready PID TIMEOUT CMD…   until CMD succeeds; dies when PID exits or fails
#   stop_daemon PID GRACE         SIGTERM, SIGKILL after GRACE seconds
#   daemon_down WHERE GRACE [CMD…]
#                                 `down`: stop what this script started, if it runs
#   daemon_status WHERE CMD…      `status`: exit 0 when CMD says ready
#   show_log_tail                 first errors and the last 40 lines of LOG

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# daemon_files BASE PORT DEFAULT PATTERN: one instance per PORT, each with
# its pid file, log and lock: $CACHE/BASE$SFX.pid, BASE$SFX.log and
# .lock$SFX, where SFX is "-PORT", or empty for the DEFAULT port (which
# keeps the plain names).
daemon_files() {
	SFX="-$2"
	[[ "$2" != "$3" ]] || SFX=""
	PIDFILE="$CACHE/$1$SFX.pid"
	LOG="$CACHE/$1$SFX.log"
	LOCK="$CACHE/.lock$SFX"
	DAEMON_PATTERN="$4"
}

# listening PORT: something listens on PORT, read from /proc/net/tcp{,6}
# without connecting. A connect to a port of the kernel's ephemeral range
# that nobody listens on can connect the socket to itself, and the port then
# stays in TIME-WAIT, where a server cannot bind it. Without /proc, assume
# it listens (and let the caller connect).
listening() {
	[[ -r /proc/net/tcp ]] || return 0
	awk -v p=":$(printf '%04X' "$1")" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# port_answers PORT: a connection to 127.0.0.1:PORT is accepted (tried only
# when something listens there: see listening).
port_answers() {
	listening "$1" && (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# port_taken PORT: a server started now could not bind PORT: a socket
# listens on it, or a live connection holds it as its local end (a client
# given PORT from the ephemeral range). Sockets of a process that has ended
# (TIME-WAIT and the other closing states) do not count: a server restarted
# on its own port binds over those. Read from /proc/net/tcp{,6} without
# connecting; without /proc, whether a connection is accepted.
port_taken() {
	[[ -r /proc/net/tcp ]] || {
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
		return
	}
	awk -v p=":$(printf '%04X' "$1")" 'FNR > 1 && $4 ~ /^(01|02|03|0A)$/ && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# take_lock: serialise up/down of one instance (concurrent test runs). The
# lock is fd 9, which start_detached closes for the process it starts.
take_lock() {
	mkdir -p "$CACHE"
	exec 9>"$LOCK"
	flock 9
}

# our_pid: print the pid of the process this script started, if it is still
# alive and still ours (its command line matches DAEMON_PATTERN).
our_pid() {
	[[ -f "$PIDFILE" ]] || return 1
	local pid
	pid="$(cat "$PIDFILE" 2>/dev/null || true)"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qE "$DAEMON_PATTERN" || return 1
	echo "$pid"
}

# data_dir KEPT KEY: print the folder a start keeps its data in, created:
# KEPT (made absolute) when set, which a restart reuses; otherwise a fresh
# one per start, $CACHE/data-KEY-<time>-<pid>, after deleting the earlier
# ones of KEY (restarting on old metadata is unreliable).
data_dir() {
	local data
	if [[ -n "$1" ]]; then
		mkdir -p "$1"
		data="$(cd "$1" && pwd)"
	else
		rm -rf "$CACHE"/data-"$2"-*
		data="$CACHE/data-$2-$(date +%Y%m%d-%H%M%S)-$$"
		mkdir -p "$data"
	fi
	echo "$data"
}

# start_detached DIR WHAT CMD...: start CMD in DIR with its output appended
# to a fresh LOG (the previous one kept as LOG.prev), wait for its pid in
# PIDFILE and print it. setsid+nohup: it survives this script and its terminal; bash
# -c writes its own pid and then execs CMD, so the pid file holds CMD's pid
# whether or not setsid forked. fds 8 (scripts/lib/jvm.sh's fetch lock) and
# 9 (take_lock) are not passed on.
start_detached() {
	local dir="$1" what="$2"
	shift 2
	[[ -f "$LOG" ]] && mv -f "$LOG" "$LOG.prev"
	: >"$LOG"
	rm -f "$PIDFILE"
	(
		cd "$dir" || exit 1
		# shellcheck disable=SC2016 # $$ and $0 belong to the inner bash
		setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$PIDFILE" "$@" \
			>>"$LOG" 2>&1 </dev/null 8>&- 9>&- &
	)
	for _ in $(seq 1 50); do
		if [[ -s "$PIDFILE" ]]; then
			cat "$PIDFILE"
			return 0
		fi
		sleep 0.1
	done
	show_log_tail
	die "could not start $what"
}

after_exit() {
	[[ -z "${DAEMON_AFTER_EXIT:-}" ]] || "$DAEMON_AFTER_EXIT" "$1"
}

# wait_ready PID TIMEOUT CMD...: wait until CMD succeeds. Dies (with the
# log's tail) when PID exits or its log shows DAEMON_FAILED (then PID is
# killed); returns 1 after TIMEOUT seconds with PID still running, for the
# caller to say what it waited for.
wait_ready() {
	local pid="$1" timeout="$2" t0=$SECONDS next=10
	shift 2
	while ! "$@"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			show_log_tail
			rm -f "$PIDFILE"
			after_exit 0
			die "$DAEMON_WHAT (pid $pid) exited during start-up"
		fi
		if [[ -n "${DAEMON_FAILED:-}" ]] && grep -qE "$DAEMON_FAILED" "$LOG" 2>/dev/null; then
			show_log_tail
			kill -KILL "$pid" 2>/dev/null || true
			rm -f "$PIDFILE"
			after_exit 0
			die "$DAEMON_WHAT failed to start (see $LOG)"
		fi
		if ((SECONDS - t0 >= timeout)); then
			show_log_tail
			return 1
		fi
		if ((SECONDS - t0 >= next)); then
			log "  … waiting for $DAEMON_WHAT ($((SECONDS - t0))s)"
			next=$((next + 10))
		fi
		sleep 0.5
	done
}

# stop_daemon PID GRACE: SIGTERM, then SIGKILL when PID still runs after
# GRACE seconds; removes PIDFILE and calls DAEMON_AFTER_EXIT.
stop_daemon() {
	local pid="$1" grace="$2" t0=$SECONDS clean=1
	log "stopping $DAEMON_WHAT (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS - t0 >= grace)); then
			log "still running after ${grace}s: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			clean=0
			sleep 0.5
			break
		fi
		sleep 0.2
	done
	rm -f "$PIDFILE"
	after_exit "$clean"
	log "stopped in $((SECONDS - t0))s"
}

# daemon_down WHERE GRACE [CMD...]: the `down` command. Stops the process
# this script started; when there is none, one that CMD finds ready (at
# WHERE, e.g. "admin :8080") is left alone.
daemon_down() {
	local where="$1" grace="$2" pid
	shift 2
	take_lock
	if pid="$(our_pid)"; then
		stop_daemon "$pid" "$grace"
	elif (($#)) && "$@"; then
		rm -f "$PIDFILE"
		log "none started by this script is running (the one ready at $where was left alone)"
	else
		rm -f "$PIDFILE"
		log "not running"
	fi
}

# daemon_status WHERE CMD...: the `status` command; exit status 0 when CMD
# says ready.
daemon_status() {
	local where="$1" pid
	shift
	if "$@"; then
		if pid="$(our_pid)"; then log "ready (pid $pid, $where)"; else log "ready ($where, not started by this script)"; fi
		return 0
	fi
	if pid="$(our_pid)"; then log "running (pid $pid), not ready yet"; else log "not running"; fi
	return 1
}

# show_log_tail: the first three lines of LOG that match DAEMON_ERRORS (and
# not DAEMON_NOISE), then its last 40 lines.
show_log_tail() {
	local errs=""
	if [[ -n "${DAEMON_ERRORS:-}" ]]; then
		errs="$(grep -E "$DAEMON_ERRORS" "$LOG" 2>/dev/null | { if [[ -n "${DAEMON_NOISE:-}" ]]; then grep -vE "$DAEMON_NOISE"; else cat; fi; } |
			head -n 3 | cut -c1-400 || true)"
	fi
	if [[ -n "$errs" ]]; then
		log "first errors in $LOG:"
		echo "$errs" >&2
	fi
	log "last 40 lines of $LOG:"
	tail -n 40 "$LOG" >&2 2>/dev/null || true
}
