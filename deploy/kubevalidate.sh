#!/usr/bin/env bash
# Prints the path of kubernetes-validate (PyPI, pinned in
# deploy/kubevalidate-requirements.txt), installing it first into a
# virtualenv of its own under ${TOOLGATE_CACHE:-<repo>/.cache}/kubevalidate
# when missing or when the requirements changed. Progress goes to stderr.
# Interpreter: $PYTHON or python3.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$ROOT/scripts/lib/common.sh"
cache_dir kubevalidate
VENV="$CACHE/venv"
REQ="$ROOT/deploy/kubevalidate-requirements.txt"
STAMP="$VENV/.requirements.sha256"
PYTHON="${PYTHON:-python3}"

install() {
	local want
	want="$({ "$PYTHON" -c 'import sys; print(sys.version_info[:2])'; cat "$REQ"; } | sha256sum | cut -d' ' -f1)"
	if [[ -x "$VENV/bin/kubernetes-validate" && "$(cat "$STAMP" 2>/dev/null)" == "$want" ]]; then
		return 0
	fi
	log "installing kubernetes-validate into $VENV"
	rm -rf "$VENV"
	"$PYTHON" -m venv "$VENV" >&2 || die "'$PYTHON -m venv' failed (Debian: apt-get install python3-venv)"
	PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "$VENV/bin/python" -m pip install -q -r "$REQ" >&2
	echo "$want" >"$STAMP"
}

# tests running in parallel share one virtualenv
with_lock "$CACHE/.lock" install
echo "$VENV/bin/kubernetes-validate"
