#!/usr/bin/env bash
# Project-local Python virtualenv holding the TrustGraph reference peer
# (trustgraph-base / trustgraph-flow from PyPI, giving `joke-service`), the
# Python test helpers (pytest, grpcio-tools, requests, openapi-python-client),
# and the Python SDK (pip install ./sdk/python) with its checks (ruff, mypy).
#
# Usage:
#   scripts/pyenv.sh            ensure the venv is installed and current; print its path
#   scripts/pyenv.sh python     ensure, then print the venv's python interpreter
#   scripts/pyenv.sh bin NAME   ensure, then print the path of the venv's console script NAME
#   scripts/pyenv.sh path       print the venv path only (no install, no check)
#   scripts/pyenv.sh rebuild    delete the venv and install it again; print its path
#
# Location: ${TOOLGATE_CACHE:-<repo>/.cache}/venv. Interpreter: $PYTHON or python3.
# Idempotent: a stamp file in the venv holds a hash of the requirements files
# and of the interpreter version; packages are (re)installed only when it
# differs. The SDK has a stamp of its own (a hash of its sources): when only
# they changed, it alone is installed again. Progress goes to stderr; stdout
# carries only the printed path.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$SCRIPT_DIR/lib/common.sh"
cache_dir venv
VENV="$CACHE"
REQ="$SCRIPT_DIR/python/requirements.txt"
REQ_NODEPS="$SCRIPT_DIR/python/requirements-nodeps.txt"
STAMP="$VENV/.toolgate-requirements.sha256"
SDK="$(cd "$SCRIPT_DIR/.." && pwd)/sdk/python"
REQ_SDK="$SDK/requirements-dev.txt"
SDK_STAMP="$VENV/.toolgate-sdk.sha256"
PYTHON="${PYTHON:-python3}"

want_hash() {
	{
		"$PYTHON" -c 'import sys; print("python", sys.version_info[:2])'
		cat "$REQ" "$REQ_NODEPS" "$REQ_SDK"
	} | sha256sum | cut -d' ' -f1
}

# sdk_hash: the SDK's package sources, which `pip install ./sdk/python` copies.
sdk_hash() {
	(cd "$SDK" && find pyproject.toml README.md src/toolgate_service -type f ! -path '*/__pycache__/*' -print0 2>/dev/null |
		sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1
}

# install_sdk: the SDK from the checkout, when its sources changed (no
# dependencies: they are pinned above; no build isolation: the venv's pinned
# setuptools builds it, offline).
install_sdk() {
	local want
	want="$(sdk_hash)"
	if [[ -f "$SDK_STAMP" && "$(cat "$SDK_STAMP")" == "$want" ]]; then
		return 0
	fi
	PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
		"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation --force-reinstall "$SDK" >&2
	"$VENV/bin/python" -c 'import toolgate_service' >&2
	echo "$want" >"$SDK_STAMP.tmp" && mv "$SDK_STAMP.tmp" "$SDK_STAMP"
}

install() {
	local want have=""
	want="$(want_hash)"
	if [[ -x "$VENV/bin/python" && -f "$STAMP" ]]; then
		have="$(cat "$STAMP")"
	fi
	if [[ "$have" == "$want" ]]; then
		install_sdk
		return 0
	fi

	local t0=$SECONDS
	if [[ ! -x "$VENV/bin/python" ]]; then
		log "creating $VENV and installing TrustGraph reference peer + test deps (first run, about a minute)..."
		rm -rf "$VENV"
		if ! "$PYTHON" -m venv "$VENV" >&2; then
			log "'$PYTHON -m venv' failed (on Debian: apt-get install python3-venv)"
			rm -rf "$VENV"
			exit 1
		fi
	else
		log "requirements changed; reinstalling into $VENV..."
	fi
	rm -f "$STAMP"

	export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
	"$VENV/bin/python" -m pip install -q -r "$REQ" >&2
	"$VENV/bin/python" -m pip install -q --no-deps -r "$REQ_NODEPS" >&2
	"$VENV/bin/python" -m pip install -q -r "$REQ_SDK" >&2
	rm -f "$SDK_STAMP"
	install_sdk
	# Fail now, not in a test, if the reference peer cannot be imported.
	"$VENV/bin/python" -c 'import pulsar, grpc, grpc_tools, pytest, requests, httpx, attrs
from trustgraph.schema import ToolServiceRequest, ToolServiceResponse
from trustgraph.base import DynamicToolService
import trustgraph.tool_service.joke.service' >&2
	[[ -x "$VENV/bin/joke-service" ]] || die "joke-service console script missing"
	[[ -x "$VENV/bin/openapi-python-client" ]] || die "openapi-python-client console script missing"
	[[ -x "$VENV/bin/mypy" && -x "$VENV/bin/ruff" ]] || die "mypy or ruff missing (sdk/python/requirements-dev.txt)"

	echo "$want" >"$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
	log "venv ready in $((SECONDS - t0))s: $VENV"
}

locked_install() { with_lock "$CACHE_ROOT/.venv.lock" install; }

cmd="${1:-ensure}"
case "$cmd" in
path)
	echo "$VENV"
	;;
ensure | install)
	locked_install
	echo "$VENV"
	;;
python)
	locked_install
	echo "$VENV/bin/python"
	;;
bin)
	[[ $# -ge 2 ]] || { log "usage: $0 bin NAME"; exit 2; }
	locked_install
	[[ -x "$VENV/bin/$2" ]] || die "no console script '$2' in $VENV/bin"
	echo "$VENV/bin/$2"
	;;
rebuild)
	rm -rf "$VENV"
	locked_install
	echo "$VENV"
	;;
-h | --help | help)
	sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
	;;
*)
	log "unknown command '$cmd' (try: path, python, bin NAME, rebuild)"
	exit 2
	;;
esac
