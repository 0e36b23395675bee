// Package operations_test runs durable operations on the real broker:
// gateways as separate processes and in process, a Go SDK echo service.
package operations_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
)

const (
	aliceKey = "alice-key-0123456789"
	bobKey   = "bob-key-0123456789"
)

// setup starts an echo service on a fresh topic and writes the registry
// and the API keys of alice and bob (users named afresh each time); it
// returns the gateway flags.
func setup(t *testing.T) []string {
	t.Helper()
	return setupWith(t, echo.Handle)
}

// setupWith is setup with the service's handler h in place of echo's.
func setupWith(t *testing.T, h toolservice.Handler) []string {
	t.Helper()
	return setupService(t, 0, h)
}

// setupService is setupWith with the service running up to
// maxConcurrency calls at once (0: the SDK's default).
func setupService(t *testing.T, maxConcurrency int, h toolservice.Handler) []string {
	t.Helper()
	brokertest.RequirePulsar(t)
	topic := brokertest.UniqueTopic("opsecho")
	svc, err := toolservice.New(toolservice.Config{ID: "echo-service", Topic: topic, PulsarURL: brokertest.PulsarURL(), MaxConcurrency: maxConcurrency}, h)
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RunService(t, "echo", svc, 0)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// echo-task is echo that MCP clients may call as a task.
	reg := write("registry.yaml", fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, service: echo-service}\n"+
		"  echo-task: {type: tool-service, service: echo-service, task-support: optional}\n", topic))
	// Users of their own: the operations table outlives the test, and a
	// caller's list shows every operation of theirs still kept.
	keys := write("keys.yaml", fmt.Sprintf("keys:\n  - {hash: %q, user: %s, roles: [user]}\n  - {hash: %q, user: %s, roles: [user]}\n",
		auth.HashKey(aliceKey), brokertest.UniqueTopic("alice"), auth.HashKey(bobKey), brokertest.UniqueTopic("bob")))
	// Operations of the test's own (a key made afresh, topics of its
	// own): no other test's gateways see its records or take its replies.
	return append([]string{"--registry", reg, "--api-keys", keys, "--announcements=false"}, brokertest.TestOperations(t).Flags()...)
}

// flagValue is the value following --name in flags ("" when absent).
func flagValue(flags []string, name string) string {
	for i, f := range flags {
		if f == "--"+name && i+1 < len(flags) {
			return flags[i+1]
		}
	}
	return ""
}

// gatewayProcess is the gateway binary, run as a process of its own.
type gatewayProcess struct {
	cmd  *exec.Cmd
	base string
	logs *strings.Builder
}

func startProcess(t *testing.T, args ...string) *gatewayProcess {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "gateway")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gateway")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	httpAddr := freeAddr(t)
	p := &gatewayProcess{base: "http://" + httpAddr, logs: &strings.Builder{}}
	p.cmd = exec.Command(bin, append([]string{"--grpc-addr", freeAddr(t), "--http-addr", httpAddr, "--admin-addr", "127.0.0.1:0",
		"--pulsar-url", brokertest.PulsarURL(), "--instance-id", "gw-a-" + brokertest.UniqueTopic("p")}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("gateway A's log:\n%s", p.logs.String())
		}
	})
	eventually.True(t, 60*time.Second, "gateway A ready", func() bool { return ready(p.base) })
	return p
}

func ready(base string) bool {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return brokertest.FreeAddr(t)
}

// do sends a request as the holder of key and decodes the JSON answer.
func do(t *testing.T, method, url, key, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %q", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

// TestOperationOutlivesItsGateway: an operation started on gateway A (a
// 6 s call), A killed with SIGKILL while the service has it; gateway B reports it
// done with the right output to the same caller, and another caller gets
// NOT_FOUND from both.
func TestOperationOutlivesItsGateway(t *testing.T) {
	handling := make(chan struct{}, 1) // the service has the call
	var answered atomic.Bool           // the service answered it
	flags := setupWith(t, func(ctx context.Context, r *toolservice.Request) (any, error) {
		select {
		case handling <- struct{}{}:
		default:
		}
		defer answered.Store(true)
		return echo.Handle(ctx, r)
	})
	a := startProcess(t, flags...)
	b := apptest.Start(t, nil, flags...)
	b.WaitReady(t, 60*time.Second)
	bBase := "http://" + b.HTTPAddr()

	msg := "survives-" + brokertest.UniqueTopic("m")
	code, op := do(t, http.MethodPost, a.base+"/v1/tools/echo:start", aliceKey,
		fmt.Sprintf(`{"arguments": {"mode": "sleep", "ms": 6000, "msg": %q}, "timeout": "60s"}`, msg))
	if code != http.StatusOK || op["done"] != false {
		t.Fatalf("start: %d %v", code, op)
	}
	name, _ := op["name"].(string)
	id, ok := strings.CutPrefix(name, "operations/")
	if !ok || id == "" {
		t.Fatalf("start answered name %q", name)
	}
	// Not bob's: NOT_FOUND from A, as for an id that does not exist.
	for _, base := range []string{a.base, bBase} {
		if code, e := do(t, http.MethodGet, base+"/v1/operations/"+id, bobKey, ""); code != http.StatusNotFound {
			t.Fatalf("bob's GET on %s: %d %v, want 404", base, code, e)
		}
	}
	// B knows it from the table while it runs.
	eventually.True(t, 5*time.Second, "B to show alice's running operation", func() bool {
		code, got := do(t, http.MethodGet, bBase+"/v1/operations/"+id, aliceKey, "")
		return code == http.StatusOK && got["done"] == false
	})
	select { // A dies while the service has the call
	case <-handling:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not reach the service")
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	if ready(a.base) {
		t.Fatal("gateway A still answers after SIGKILL")
	}

	// B answers the wait once the reply is recorded.
	var got map[string]any
	eventually.True(t, 30*time.Second, "B to report the operation done", func() bool {
		code, got = do(t, http.MethodPost, bBase+"/v1/operations/"+id+":wait", aliceKey, `{"timeout": "5s"}`)
		return code == http.StatusOK && got["done"] == true
	})
	resp, _ := got["response"].(map[string]any)
	if resp == nil || resp["output"] != msg {
		t.Fatalf("B reports %v, want the output %q", got, msg)
	}
	if !answered.Load() {
		t.Fatal("done before the service answered the 6 s call")
	}
	if code, e := do(t, http.MethodGet, bBase+"/v1/operations/"+id, bobKey, ""); code != http.StatusNotFound {
		t.Fatalf("bob's GET on B after the end: %d %v, want 404", code, e)
	}
	// The list is alice's: it has the operation; bob's does not.
	_, list := do(t, http.MethodGet, bBase+"/v1/operations?filter=done=true", aliceKey, "")
	if !bytes.Contains(mustJSON(t, list), []byte(id)) {
		t.Fatalf("alice's list on B lacks %s: %v", id, list)
	}
	_, list = do(t, http.MethodGet, bBase+"/v1/operations", bobKey, "")
	if bytes.Contains(mustJSON(t, list), []byte(id)) {
		t.Fatalf("bob's list on B shows alice's %s: %v", id, list)
	}
}

// TestOperationCancelAndDelete: a cancelled operation is done with
// CANCELLED on every gateway, and a deleted one is gone.
func TestOperationCancelAndDelete(t *testing.T) {
	replied := make(chan struct{}, 1) // the service answered the call
	flags := setupWith(t, func(ctx context.Context, r *toolservice.Request) (any, error) {
		defer func() {
			select {
			case replied <- struct{}{}:
			default:
			}
		}()
		return echo.Handle(ctx, r)
	})
	a := apptest.Start(t, nil, flags...)
	b := apptest.Start(t, nil, flags...)
	a.WaitReady(t, 60*time.Second)
	b.WaitReady(t, 60*time.Second)
	aBase, bBase := "http://"+a.HTTPAddr(), "http://"+b.HTTPAddr()
	_, op := do(t, http.MethodPost, aBase+"/v1/tools/echo:start", aliceKey, `{"arguments": {"mode": "sleep", "ms": 3000, "msg": "late"}}`)
	id := strings.TrimPrefix(op["name"].(string), "operations/")
	known(t, bBase, id)
	if code, e := do(t, http.MethodPost, bBase+"/v1/operations/"+id+":cancel", bobKey, "{}"); code != http.StatusNotFound {
		t.Fatalf("bob's cancel: %d %v, want 404", code, e)
	}
	if code, e := do(t, http.MethodPost, bBase+"/v1/operations/"+id+":cancel", aliceKey, "{}"); code != http.StatusOK {
		t.Fatalf("cancel: %d %v", code, e)
	}
	for _, base := range []string{aBase, bBase} {
		eventually.True(t, 5*time.Second, "the operation cancelled on "+base, func() bool {
			code, got := do(t, http.MethodGet, base+"/v1/operations/"+id, aliceKey, "")
			e, _ := got["error"].(map[string]any)
			return code == http.StatusOK && got["done"] == true && e != nil && e["code"] == float64(1)
		})
	}
	// The reply that comes later does not turn it back.
	select {
	case <-replied:
	case <-time.After(10 * time.Second):
		t.Fatal("the service did not answer the cancelled call")
	}
	time.Sleep(500 * time.Millisecond) //nolint:forbidigo // the late reply, sent, is taken in and ignored: nothing marks an ignored reply
	if _, got := do(t, http.MethodGet, bBase+"/v1/operations/"+id, aliceKey, ""); got["response"] != nil {
		t.Fatalf("a cancelled operation took the late reply: %v", got)
	}
	if code, e := do(t, http.MethodDelete, bBase+"/v1/operations/"+id, aliceKey, ""); code != http.StatusOK {
		t.Fatalf("delete: %d %v", code, e)
	}
	eventually.True(t, 5*time.Second, "the deleted operation gone from A", func() bool {
		code, _ := do(t, http.MethodGet, aBase+"/v1/operations/"+id, aliceKey, "")
		return code == http.StatusNotFound
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
