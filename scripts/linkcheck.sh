#!/usr/bin/env bash
# `make lint`: fail when the core, a door or a middleware package links the
# Pulsar client. depguard (.golangci.yml) sees the import lines of a
# package's own files only; this walks the whole graph a binary built from
# the package would link (`go list -deps`), so an indirect import — the
# core using a type of a package that itself imports Pulsar — fails too.
# It names, for each package that fails, the packages of this module that
# import the client directly and lie on its graph.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
forbidden=github.com/apache/pulsar-client-go
module=$($GO list -m)
# the core, its doors and the middleware that wraps it
packages=(
	./internal/toolcall
	./internal/grpcapi
	./internal/connectapi
	./internal/httpapi
	./internal/httpcall
	./internal/httpstatus
	./internal/rootmux
	./internal/doorconf
	./internal/mcp
	./internal/docs
	./internal/apiproto
	./internal/auth
	./internal/limits
	./internal/quota
	./internal/idempotency
	./internal/telemetry
)
failed=0
for p in "${packages[@]}"; do
	deps=$($GO list -deps "$p")
	if grep -q "^$forbidden" <<<"$deps"; then
		failed=1
		# who in this module imports the client, on p's graph
		via=$($GO list -deps -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' "$p" |
			awk -v f="$forbidden" -v m="$module" '$1 ~ "^" m { for (i = 2; i <= NF; i++) if (index($i, f) == 1) { print "    " $1; break } }')
		echo "$p links $forbidden, imported by:" >&2
		echo "$via" >&2
	fi
done
if ((failed)); then
	echo "the core, a door or a middleware links the Pulsar client: it may use internal/transport (the interface) only; the client lives in internal/transport/pulsarbroker and internal/registry/pulsarsrc, wired in internal/app" >&2
	exit 1
fi
