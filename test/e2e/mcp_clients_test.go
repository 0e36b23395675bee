package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMCPTypeScriptClients runs test/e2e/testdata/mcp-clients/clients.mjs
// with node against the shared gateway and a secured one: the TypeScript
// SDK v2 (@modelcontextprotocol/client, negotiation auto — which must
// reach 2026-07-28 — and legacy) and 1.x (@modelcontextprotocol/sdk),
// pinned in scripts/mcp-clients (scripts/mcp-clients.sh installs them).
// Each lists tools with their schemas, calls one, reads a stream as
// ordered progress, gets a tool error as a result, cancels a call (which
// must end at the gateway) and is refused without credentials.
func TestMCPTypeScriptClients(t *testing.T) {
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	tools := npmInstall(t, ctx, root, "mcp-clients.sh")
	sec := startMCPSecured(t)
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(root, "test", "e2e", "testdata", "mcp-clients", "clients.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "clients.mjs"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(tools, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	vars := []string{"TOOLGATE_MCP_URL=" + env.httpBase + "/mcp", "TOOLGATE_MCP_SECURED_URL=" + sec.base + "/mcp", "TOOLGATE_ADMIN_BASE=" + env.adminBase}
	for _, client := range []string{"v2-auto", "v2-legacy", "v1"} {
		t.Run(client, func(t *testing.T) {
			out := runTool(t, ctx, dir, vars, "node", "clients.mjs", client)
			t.Log(out)
			for _, w := range []string{"ok list with schemas", "ok call", "ok stream with ordered progress", "ok error result",
				"ok cancellation", "ok unauthenticated refused", "PASS " + client} {
				if !strings.Contains(out, w) {
					t.Errorf("%s's output lacks %q", client, w)
				}
			}
		})
	}
}
