#!/usr/bin/env bash
# Every fuzz target of the module (func Fuzz… in a _test.go file of a
# package `go list ./...` lists), each fuzzed for FUZZTIME (a Go duration,
# or Nx for N inputs; default 2s): `make test` runs it so, `make fuzz`
# longer (FUZZTIME=30s by default). FUZZ, a regular expression, picks the
# targets by name (default: all). A failure stops the run; Go keeps the
# input that failed in the package's testdata/fuzz/<target>/, where it
# becomes a seed that every `go test` run replays: commit it with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-2s}"
match="${FUZZ:-.}"

targets=()
while IFS= read -r dir; do
	rel="./${dir#"$PWD"/}"
	[[ $dir == "$PWD" ]] && rel=.
	while IFS= read -r name; do
		targets+=("$rel $name")
	done < <(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | grep -E -- "$match" | sort -u || true)
done < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.Dir}}{{end}}' ./... | grep -v '^$')

if [[ ${#targets[@]} == 0 ]]; then
	echo "no fuzz target matches ${match}" >&2
	exit 1
fi
t0=$SECONDS
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "--- fuzz $pkg $name ($fuzztime)"
	if ! out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" 2>&1); then
		echo "$out"
		echo "FAIL: $pkg $name (the failing input is in $pkg/testdata/fuzz/$name/)" >&2
		exit 1
	fi
	# the progress lines hidden
	grep -v -e '^fuzz: elapsed' -e '^ok ' -e '^PASS$' <<<"$out" || true
done
echo "==> ${#targets[@]} fuzz targets, $fuzztime each: passed in $((SECONDS - t0)) s"
