package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenAPITypeScript generates two TypeScript clients of the served
// document — openapi-typescript's types for openapi-fetch, and
// openapi-generator's typescript-axios — type-checks
// test/e2e/testdata/typescript against them with tsc (strict), and runs
// both programs with node against the gateway: invokes, typed errors,
// pages, and streams read chunk by chunk. The npm packages are pinned in
// scripts/npm-tools (scripts/npm-tools.sh installs them).
func TestOpenAPITypeScript(t *testing.T) {
	// Not parallel: the JVM and tsc would crowd the timing-sensitive tests.
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	tools := npmTools(t, ctx, root)
	_, spec := liveSpec(t)
	dir := t.TempDir()
	for _, name := range []string{"tsconfig.json", "fetch-client.ts", "axios-client.ts"} {
		b, err := os.ReadFile(filepath.Join(root, "test", "e2e", "testdata", "typescript", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(tools, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	bin := func(name string) string { return filepath.Join(tools, "node_modules", ".bin", name) }
	runTool(t, ctx, dir, nil, bin("openapi-typescript"), spec, "-o", "schema.ts")
	axiosOut := generate(t, ctx, "typescript-axios")
	if err := os.Rename(axiosOut, filepath.Join(dir, "axios")); err != nil {
		t.Fatal(err)
	}
	runTool(t, ctx, dir, nil, bin("tsc"), "-p", ".")
	for _, prog := range []string{"fetch-client", "axios-client"} {
		t.Run(prog, func(t *testing.T) {
			out := runTool(t, ctx, dir, []string{"TOOLGATE_HTTP_BASE=" + env.httpBase}, "node", filepath.Join("dist", prog+".js"))
			t.Log(out)
			for _, w := range []string{"invoke: hello", "stream: 5 chunks", "unknown tool: 5 TOOL_NOT_FOUND", "PASS"} {
				if !strings.Contains(out, w) {
					t.Errorf("%s's output lacks %q", prog, w)
				}
			}
		})
	}
}

// npmTools installs the pinned npm packages (scripts/npm-tools.sh) and
// returns the directory holding their node_modules.
func npmTools(t *testing.T, ctx context.Context, root string) string {
	t.Helper()
	return npmInstall(t, ctx, root, "npm-tools.sh")
}

// npmInstall runs scripts/<script>, which installs a pinned set of npm
// packages and prints the directory holding their node_modules.
func npmInstall(t *testing.T, ctx context.Context, root, script string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", script))
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/%s: %v\n%s", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
