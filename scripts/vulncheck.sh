#!/usr/bin/env bash
# govulncheck against a vulnerability database built on this machine from
# golang.org/x/vulndb's OSV files at the version pinned in tools/vuln/go.mod
# (fetched through the Go module proxy), so the check needs no access to
# vuln.go.dev. The index is cached in .cache/vulndb/<version>.
set -euo pipefail
cd "$(dirname "$0")/.."
vuln() { go tool -modfile=tools/vuln/go.mod "$@"; }

version="$(go list -modfile=tools/vuln/go.mod -m -f '{{.Version}}' golang.org/x/vulndb)"
src="$(go mod download -modfile=tools/vuln/go.mod -json "golang.org/x/vulndb@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$src/data/osv" ]] || { echo "vulncheck: no data/osv in golang.org/x/vulndb@$version ($src)" >&2; exit 1; }
db="${TOOLGATE_CACHE:-$PWD/.cache}/vulndb/$version"
if [[ ! -f "$db/index/db.json" ]]; then
	echo "==> indexing the vulnerability database (golang.org/x/vulndb@$version, $(find "$src/data/osv" -mindepth 1 -maxdepth 1 -not -name '.*' | wc -l) reports)"
	rm -rf "$db.tmp" && mkdir -p "$(dirname "$db")"
	vuln indexdb -vulns "$src/data/osv" -out "$db.tmp"
	rm -rf "$db" && mv "$db.tmp" "$db"
fi
# The product's module and the benchmark's (bench/go.mod), into one stream
# of findings.
modules=(. bench)
echo "==> govulncheck ./... in ${modules[*]} (database golang.org/x/vulndb@$version, accepted: tools/vuln/allow.txt)"
json="$(mktemp)"
trap 'rm -f "$json"' EXIT
for m in "${modules[@]}"; do
	vuln govulncheck -C "$m" -db "file://$db" -format json ./... >>"$json"
done
# Fail on every vulnerability the code calls (a finding whose trace starts
# at a function) that tools/vuln/allow.txt does not accept.
if ! python3 - "$json" tools/vuln/allow.txt <<'PY'
import json, sys
allowed = {l.split()[0] for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")}
dec, text, called = json.JSONDecoder(), open(sys.argv[1]).read(), set()
i = 0
while i < len(text):
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    obj, i = dec.raw_decode(text, i)
    f = obj.get("finding")
    if f and f.get("trace") and f["trace"][0].get("function"):
        called.add(f["osv"])
bad = sorted(called - allowed)
for v in sorted(called & allowed):
    print(f"vulncheck: {v} is called but accepted (tools/vuln/allow.txt)")
for v in sorted(allowed - called):
    print(f"vulncheck: {v} is accepted but no longer found: remove it from tools/vuln/allow.txt")
if bad:
    print("vulncheck: vulnerabilities the code calls: " + ", ".join(bad))
    sys.exit(1)
print(f"vulncheck: no vulnerability the code calls beyond the {len(called & allowed)} accepted")
PY
then
	for m in "${modules[@]}"; do
		vuln govulncheck -C "$m" -db "file://$db" ./... || true
	done
	exit 1
fi
