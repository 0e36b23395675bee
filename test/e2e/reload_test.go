package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

func reloadRegistry(tool string) string {
	return fmt.Sprintf(`tool-service:
  echo-service: {topic: %s}
tool:
  %s: {type: tool-service, service: echo-service}
`, env.echoTopic, tool)
}

// writeAtomically replaces path the way config managers do: write a
// temporary file, then rename it over the old one.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestRegistryHotReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "registry.yaml")
	writeAtomically(t, path, reloadRegistry("echo-a"))
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	gw, done, err := startGateway(ctx, path, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := toolgatev1.NewToolServiceClient(conn)
	invoke := func(ctx context.Context, tool string, args map[string]any) (string, error) {
		s, _ := structpb.NewStruct(args)
		r, err := client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: tool, Arguments: s})
		return r.GetOutput(), err
	}

	// Calls in flight on echo-a while the file changes.
	published0 := metric(t, "http://"+gw.AdminAddr(), "toolgate_bridge_published_total")
	var wg sync.WaitGroup
	inflight := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("in-flight-%d", i)
			got, err := invoke(t.Context(), "echo-a", map[string]any{"mode": "sleep", "ms": 800.0, "msg": want})
			if err == nil && got != want {
				err = fmt.Errorf("got %q, want %q", got, want)
			}
			inflight <- err
		}()
	}
	eventually.True(t, 20*time.Second, "the calls published", func() bool {
		return metric(t, "http://"+gw.AdminAddr(), "toolgate_bridge_published_total")-published0 >= 20
	})
	writeAtomically(t, path, reloadRegistry("echo-b"))

	eventually.Succeeds(t, 10*time.Second, "the reload served", func() error {
		_, errA := invoke(t.Context(), "echo-a", map[string]any{"msg": "x"})
		got, errB := invoke(t.Context(), "echo-b", map[string]any{"msg": "new tool"})
		if status.Code(errA) != codes.NotFound || errB != nil || got != "new tool" {
			return fmt.Errorf("echo-a %s, echo-b %q %s; want NOT_FOUND and a reply", status.Code(errA), got, status.Code(errB))
		}
		return nil
	})
	wg.Wait()
	close(inflight)
	for err := range inflight {
		if err != nil {
			t.Fatalf("a call in flight during the reload failed: %v", err)
		}
	}

	// A broken file changes nothing; readiness shows why.
	writeAtomically(t, path, "tool:\n  broken: {type: tool-service, service: missing}\n")
	eventually.Succeeds(t, 10*time.Second, "readyz details showing the reload error", func() error {
		resp, err := http.Get("http://" + gw.AdminAddr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Details map[string]any `json:"details"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if msg, _ := body.Details["registry_last_error"].(string); !strings.Contains(msg, `service "missing" is not defined`) {
			return fmt.Errorf("details %v", body.Details)
		}
		if body.Details["registry_reload_failures"] != 1.0 {
			t.Fatalf("reload failures %v, want 1", body.Details["registry_reload_failures"])
		}
		return nil
	})
	if got, err := invoke(t.Context(), "echo-b", map[string]any{"msg": "still here"}); err != nil || got != "still here" {
		t.Fatalf("after a bad reload the last good registry must serve: %q %v", got, err)
	}
}
