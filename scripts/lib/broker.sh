# shellcheck shell=bash
# Sourced by scripts/run.sh, scripts/test.sh and scripts/run-check.sh: the one
# rule that picks the Pulsar broker, so that every process they start talks
# to the same one.
#
#   - TOOLGATE_PULSAR_URL and TOOLGATE_PULSAR_ADMIN_URL both set: that broker.
#     The scripts neither start nor stop it; it must be ready and have the
#     namespaces tg/request and tg/response.
#   - neither set: the standalone broker on 127.0.0.1, binary port
#     PULSAR_BROKER_PORT (default 6650) and admin port PULSAR_WEB_PORT
#     (default 8080), started by scripts/pulsar.sh when none answers there
#     and stopped again by the script that started it.
#   - one URL without the other, or a URL and a port that name different
#     brokers: an error.
#
# Both URLs are exported as TOOLGATE_PULSAR_URL / TOOLGATE_PULSAR_ADMIN_URL
# and the scripts also pass them as flags to each process they start.
#
#   broker_select   decide, export the URLs, set BROKER_EXTERNAL (0/1)
#   broker_up       make sure the broker is ready; BROKER_STARTED=1 if started here
#   broker_down     stop the broker if broker_up started it
#
# and, for any broker's admin URL (http://HOST:PORT):
#
#   broker_ready_code ADMIN                  HTTP status of GET /admin/v2/brokers/ready
#   broker_consumers ADMIN TOPIC             the consumers the broker reports on TOPIC
#   broker_subscribed ADMIN TOPIC SUBSCRIPTION
#                                            one of them is on SUBSCRIPTION

BROKER_EXTERNAL=0
BROKER_STARTED=0

broker_die() { echo "broker: $*" >&2; exit 1; }

broker_select() {
	local url="${TOOLGATE_PULSAR_URL:-}" admin="${TOOLGATE_PULSAR_ADMIN_URL:-}"
	if [[ -z "$url" && -z "$admin" ]]; then
		export PULSAR_BROKER_PORT="${PULSAR_BROKER_PORT:-6650}" PULSAR_WEB_PORT="${PULSAR_WEB_PORT:-8080}"
		export TOOLGATE_PULSAR_URL="pulsar://127.0.0.1:$PULSAR_BROKER_PORT"
		export TOOLGATE_PULSAR_ADMIN_URL="http://127.0.0.1:$PULSAR_WEB_PORT"
		BROKER_EXTERNAL=0
		return 0
	fi
	[[ -n "$url" && -n "$admin" ]] ||
		broker_die "TOOLGATE_PULSAR_URL ('$url') and TOOLGATE_PULSAR_ADMIN_URL ('$admin') name a broker only together: set both, or neither (then PULSAR_BROKER_PORT / PULSAR_WEB_PORT pick the local one)"
	if [[ -n "${PULSAR_BROKER_PORT:-}" && "$url" != *":$PULSAR_BROKER_PORT" ]]; then
		broker_die "TOOLGATE_PULSAR_URL=$url and PULSAR_BROKER_PORT=$PULSAR_BROKER_PORT name different brokers: unset one"
	fi
	if [[ -n "${PULSAR_WEB_PORT:-}" && "${admin%/}" != *":$PULSAR_WEB_PORT" ]]; then
		broker_die "TOOLGATE_PULSAR_ADMIN_URL=$admin and PULSAR_WEB_PORT=$PULSAR_WEB_PORT name different brokers: unset one"
	fi
	export TOOLGATE_PULSAR_URL="$url" TOOLGATE_PULSAR_ADMIN_URL="${admin%/}"
	BROKER_EXTERNAL=1
}

broker_up() {
	if [[ $BROKER_EXTERNAL == 1 ]]; then
		local code
		code="$(broker_ready_code "$TOOLGATE_PULSAR_ADMIN_URL")"
		[[ "$code" == 200 ]] || broker_die "the broker of TOOLGATE_PULSAR_ADMIN_URL=$TOOLGATE_PULSAR_ADMIN_URL is not ready (GET /admin/v2/brokers/ready: HTTP $code)"
		local ns
		ns="$(curl -fsS --max-time 5 "$TOOLGATE_PULSAR_ADMIN_URL/admin/v2/namespaces/tg" 2>&1 || true)"
		[[ "$ns" == *'"tg/request"'* && "$ns" == *'"tg/response"'* ]] ||
			broker_die "the broker at $TOOLGATE_PULSAR_ADMIN_URL lacks the namespaces tg/request and tg/response (it has: $ns)"
		echo "==> using the broker of TOOLGATE_PULSAR_URL: $TOOLGATE_PULSAR_URL (admin $TOOLGATE_PULSAR_ADMIN_URL)"
		return 0
	fi
	if scripts/pulsar.sh status >/dev/null 2>&1; then
		echo "==> using the Pulsar broker already running on $TOOLGATE_PULSAR_URL"
		scripts/pulsar.sh ensure-ns
	else
		echo "==> starting a Pulsar broker on $TOOLGATE_PULSAR_URL (admin $TOOLGATE_PULSAR_ADMIN_URL)"
		BROKER_STARTED=1
		scripts/pulsar.sh up
	fi
}

broker_down() {
	if [[ $BROKER_STARTED == 1 ]]; then
		echo "==> stopping the Pulsar broker this run started"
		scripts/pulsar.sh down || true
		BROKER_STARTED=0
	fi
}

# broker_ready_code ADMIN: print the HTTP status the broker answers to
# GET /admin/v2/brokers/ready (200: ready; 000: no answer).
broker_ready_code() {
	curl -s -o /dev/null -w '%{http_code}' --max-time 5 "${1%/}/admin/v2/brokers/ready" || true
}

# broker_consumers ADMIN TOPIC: print a line "SUBSCRIPTION CONSUMER
# CONNECTED_SINCE" for each consumer the broker's topic stats report on
# TOPIC (e.g. non-persistent://tg/request/joke), subscriptions in name
# order. Fails when the broker does not answer or has no such topic.
broker_consumers() {
	local stats
	stats="$(curl -fsS --max-time 3 "${1%/}/admin/v2/${2/:\/\//\/}/stats" 2>/dev/null)" || return 1
	python3 -c '
import json, sys
for sub, s in sorted(json.load(sys.stdin).get("subscriptions", {}).items()):
    for c in s.get("consumers", []):
        print(sub, c.get("consumerName", "?"), c.get("connectedSince", "?"))
' <<<"$stats"
}

# broker_subscribed ADMIN TOPIC SUBSCRIPTION: the broker reports a consumer
# on SUBSCRIPTION of TOPIC.
broker_subscribed() {
	local sub
	while read -r sub _; do
		[[ "$sub" != "$3" ]] || return 0
	done < <(broker_consumers "$1" "$2")
	return 1
}
