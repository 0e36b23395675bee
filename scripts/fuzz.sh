#!/usr/bin/env bash
# Every fuzz target of the module (func Fuzz… in a _test.go file of a
# package `go list ./...` lists), each fuzzed for FUZZTIME (a Go duration,
# or Nx for N inputs; default 2s): `make test` runs it so, `make fuzz`
# longer (FUZZTIME=30s by default). FUZZ, a regular expression, picks the
# targets by name (default: all). A finding stops the run: Go keeps the
# input that failed in the package's testdata/fuzz/<target>/, where it
# becomes a seed that every `go test` run replays: commit it with the fix.
# A seed that fails, or a package that does not build, stops it too. An
# error of the fuzzing engine itself that leaves no input behind (its
# workers' deadline missed on a loaded machine) is no finding: the target
# is fuzzed once more, and if the engine fails again it is reported at the
# end without failing the run.
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
# inputs lists the inputs kept for target $2 of package $1.
inputs() { ls "$1/testdata/fuzz/$2" 2>/dev/null | sort || true; }

# Each package's test binary is built once, instrumented for fuzzing, and
# run for each of its targets from the package's directory (where its
# testdata/fuzz/ is), with the corpus cache `go test -fuzz` keeps: a
# `go test -fuzz` per target would link it again each time.
bins="$(mktemp -d -t toolgate-fuzz-XXXXXX)"
trap 'rm -rf "$bins"' EXIT
cache="$(go env GOCACHE)/fuzz"
# fuzzrun runs target $2 of package $1 for $fuzztime.
fuzzrun() {
	local pkg=$1 name=$2 bin path
	bin="$bins/$(tr '/.' '__' <<<"$pkg").test"
	if [[ ! -x $bin ]]; then
		go test -c -fuzz=. -o "$bin" "$pkg" || return
	fi
	path=$(go list "$pkg")
	(cd "$pkg" && "$bin" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "$fuzztime" \
		-test.fuzzcachedir "$cache/$path")
}

t0=$SECONDS
engine=()
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	for try in 1 2; do
		again=""
		if [[ $try == 2 ]]; then again=", again"; fi
		echo "--- fuzz $pkg $name ($fuzztime)$again"
		before=$(inputs "$pkg" "$name")
		if out=$(fuzzrun "$pkg" "$name" 2>&1); then
			# the progress lines hidden
			grep -v -e '^fuzz: elapsed' -e '^ok ' -e '^PASS$' <<<"$out" || true
			break
		fi
		echo "$out"
		if [[ $(inputs "$pkg" "$name") != "$before" ]] || grep -q -e 'Failing input written' -e 'failure while testing seed corpus' <<<"$out"; then
			echo "FAIL: $pkg $name: a finding (the failing input is in $pkg/testdata/fuzz/$name/)" >&2
			exit 1
		fi
		if grep -q -e '\[build failed\]' -e '\[setup failed\]' -e '^# ' <<<"$out"; then
			echo "FAIL: $pkg $name: the package does not build" >&2
			exit 1
		fi
		echo "fuzz: $pkg $name: the fuzzing engine failed without an input (no finding)" >&2
		if [[ $try == 2 ]]; then
			engine+=("$pkg $name")
		fi
	done
done
if [[ ${#engine[@]} -gt 0 ]]; then
	echo "==> WARNING: the fuzzing engine failed twice, without an input, on ${#engine[@]} target(s) (a loaded machine; no finding):" >&2
	printf '    %s\n' "${engine[@]}" >&2
fi
echo "==> ${#targets[@]} fuzz targets, $fuzztime each: no finding, in $((SECONDS - t0)) s"
