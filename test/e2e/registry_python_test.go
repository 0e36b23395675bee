package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// runPython runs a script of test/python with the venv's interpreter and
// fails the test with its output when it fails.
func runPython(t *testing.T, script string, args ...string) time.Time {
	t.Helper()
	venv := interopVenv(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), append([]string{filepath.Join(root, "test", "python", script)}, args...)...)
	cmd.Env = append(os.Environ(), "TOOLGATE_PULSAR_URL="+brokertest.PulsarURL())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
	return time.Now()
}

// A service announced by hand (the Python helper, as a Python service or an
// operator would) is served; withdrawing it with the same helper makes its
// tool NOT_FOUND.
func TestPythonAnnouncement(t *testing.T) {
	t.Parallel()
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("announce")
	g := startSourceGateway(t, "--announce-topic", topic)
	id := brokertest.UniqueTopic("py-announced")
	tool := id + "-echo"
	// The shared echo service of this package answers on env.echoTopic.
	toolJSON, _ := json.Marshal(map[string]any{"name": tool, "description": "announced from Python",
		"arguments": []any{map[string]any{"name": "msg", "type": "string"}}})
	done := runPython(t, "announce.py", "--announce-topic", topic, "announce", "--id", id,
		"--request-queue", "non-persistent://tg/request/"+env.echoTopic, "--response-queue", "non-persistent://tg/response/"+env.echoTopic,
		"--tool", string(toolJSON))
	err := eventually.Within(5*time.Second, func() error {
		out, err := g.invoke(t.Context(), tool, map[string]any{"msg": "from python"})
		if err == nil && out != "from python" {
			err = fmt.Errorf("got %q", out)
		}
		return err
	})
	if err != nil {
		t.Fatalf("a service announced from Python: not callable: %v", err)
	}
	_ = done
	r, err := g.client.GetTool(t.Context(), &toolgatev1.GetToolRequest{Name: tool})
	if err != nil || r.GetTool().GetSource() != "announcement" || r.GetTool().GetDescription() != "announced from Python" {
		t.Fatalf("GetTool = %v, %v", r.GetTool(), err)
	}
	runPython(t, "announce.py", "--announce-topic", topic, "withdraw", "--id", id)
	err = eventually.Within(5*time.Second, func() error {
		if _, err := g.invoke(t.Context(), tool, map[string]any{"msg": "x"}); status.Code(err) != codes.NotFound {
			return fmt.Errorf("code %s (%s), want NOT_FOUND", status.Code(err), status.Convert(err).Message())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("withdrawn from Python: %v", err)
	}
}

// TrustGraph's config service as a registry source: a tool added with
// TrustGraph's own Python API becomes callable, and deleting it
// makes it NOT_FOUND. config-svc (with Cassandra) must run: scripts/test.sh
// starts both (scripts/cassandra.sh, scripts/configsvc.sh).
func TestTrustGraphConfigService(t *testing.T) {
	t.Parallel()
	if brokertest.Subscriptions("non-persistent://tg/request/config") == 0 {
		t.Fatal("TrustGraph's config-svc is required and not running (no consumer on non-persistent://tg/request/config): " +
			"start it with scripts/cassandra.sh up && scripts/configsvc.sh up, or run make test")
	}
	g := startSourceGateway(t, "--trustgraph-config", "--announcements=false")
	if st := sourceStatus(t, g.readyDetails(t), "config-service"); st["synced"] != true {
		t.Fatalf("the config-service source did not sync at start: %v", st)
	}
	svc := brokertest.UniqueTopic("tg-svc")
	tool := brokertest.UniqueTopic("tg-tool")
	svcJSON, _ := json.Marshal(map[string]any{"id": svc,
		"request-queue": "non-persistent://tg/request/" + env.echoTopic, "response-queue": "non-persistent://tg/response/" + env.echoTopic,
		"config-params": []any{map[string]any{"name": "flavour", "required": false}}})
	toolJSON, _ := json.Marshal(map[string]any{"type": "tool-service", "name": tool, "description": "from TrustGraph's config",
		"service": svc, "flavour": "vanilla", "arguments": []any{map[string]any{"name": "mode", "type": "string"}}})
	t.Cleanup(func() {
		// Leave nothing behind in the shared workspace.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, kv := range [][2]string{{"tool", tool}, {"tool-service", svc}} {
			cmd := exec.CommandContext(ctx, filepath.Join(interopVenv(t), "bin", "python"), filepath.Join("..", "python", "tg_config_item.py"), "delete", kv[0], kv[1])
			cmd.Env = append(os.Environ(), "TOOLGATE_PULSAR_URL="+brokertest.PulsarURL())
			_ = cmd.Run()
		}
	})
	runPython(t, "tg_config_item.py", "put", "tool-service", svc, string(svcJSON))
	runPython(t, "tg_config_item.py", "put", "tool", tool, string(toolJSON))
	err := eventually.Within(5*time.Second, func() error {
		out, err := g.invoke(t.Context(), tool, map[string]any{"mode": "config"})
		var cfg map[string]any
		if err == nil && (json.Unmarshal([]byte(out), &cfg) != nil || cfg["flavour"] != "vanilla" || len(cfg) != 1) {
			err = fmt.Errorf("got %q, want the tool's config {\"flavour\": \"vanilla\"}", out)
		}
		return err
	})
	if err != nil {
		t.Fatalf("a tool put with TrustGraph's API: not callable: %v", err)
	}
	r, err := g.client.GetTool(t.Context(), &toolgatev1.GetToolRequest{Name: tool})
	if err != nil || r.GetTool().GetSource() != "config-service" || r.GetTool().GetService() != svc {
		t.Fatalf("GetTool = %v, %v; want source config-service", r.GetTool(), err)
	}
	runPython(t, "tg_config_item.py", "delete", "tool", tool)
	err = eventually.Within(5*time.Second, func() error {
		if _, err := g.invoke(t.Context(), tool, map[string]any{}); status.Code(err) != codes.NotFound {
			return fmt.Errorf("code %s (%s), want NOT_FOUND", status.Code(err), status.Convert(err).Message())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("a tool deleted with TrustGraph's API: %v", err)
	}
}

// The protocol facts the config-service source relies on
// (docs/trustgraph-config.md), checked against the running config-svc by
// test/python/test_configsvc.py.
func TestTrustGraphConfigServiceProtocol(t *testing.T) {
	venv := interopVenv(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider",
		"test/python/test_configsvc.py")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TOOLGATE_PULSAR_URL="+brokertest.PulsarURL(), "TOOLGATE_PULSAR_ADMIN_URL="+brokertest.AdminURL(),
		"PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), out)
	if err != nil {
		t.Fatalf("pytest test/python/test_configsvc.py: %v", err)
	}
	if strings.Contains(string(out), "skipped") || !strings.Contains(string(out), "passed") {
		t.Fatal("test_configsvc.py skipped tests or ran none")
	}
}
