package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConnectESGRPC calls the HTTP listener, which has no TLS, with
// Connect-ES's gRPC transport from Node (HTTP/2 with prior knowledge):
// an invoke, a stream and a typed error, through the descriptors of
// proto/ that buf builds (test/e2e/testdata/connect-es; the npm packages
// are pinned in scripts/npm-tools).
func TestConnectESGRPC(t *testing.T) {
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	tools := npmTools(t, ctx, root)
	// buf reads the google/api protos beside ours (scripts/googleapis.sh).
	runTool(t, ctx, root, nil, filepath.Join(root, "scripts", "googleapis.sh"))
	dir := t.TempDir()
	descriptors := filepath.Join(dir, "toolgate.binpb")
	runTool(t, ctx, root, nil, "go", "tool", "-modfile=tools/buf/go.mod", "buf", "build", "-o", descriptors)
	src, err := os.ReadFile(filepath.Join(root, "test", "e2e", "testdata", "connect-es", "grpc-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "grpc-client.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(tools, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	out := runTool(t, ctx, dir, []string{"TOOLGATE_HTTP_BASE=" + env.httpBase, "TOOLGATE_DESCRIPTORS=" + descriptors},
		"node", "grpc-client.mjs")
	t.Log(out)
	for _, w := range []string{"invoke: hello over h2c", "stream: 4 chunks", "unknown tool: 5 google.rpc.ErrorInfo", "PASS"} {
		if !strings.Contains(out, w) {
			t.Errorf("the Connect-ES client's output lacks %q", w)
		}
	}
}
