package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/gen/toolgate/v1/toolgatev1connect"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/redistest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	quotaAliceKey = "quota-alice-key-0123456789"
	quotaBobKey   = "quota-bob-key-0123456789"
)

// quotaGateway is one gateway of TestQuotaSharedByReplicas and a way to
// call it through each door.
type quotaGateway struct {
	name  string
	base  string
	admin string
	grpc  toolgatev1.ToolServiceClient
	doors map[string]func(t *testing.T, c parityCall) outcome
}

func newQuotaGateway(t *testing.T, name string, args ...string) *quotaGateway {
	t.Helper()
	gw := runGateway(t, nil, args...)
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	grpcCli := toolgatev1.NewToolServiceClient(conn)
	connectCli := toolgatev1connect.NewToolServiceClient(http.DefaultClient, base)
	grpcWebCli := toolgatev1connect.NewToolServiceClient(http.DefaultClient, base, connect.WithGRPCWeb())
	return &quotaGateway{name: name, base: base, admin: "http://" + gw.AdminAddr(), grpc: grpcCli, doors: map[string]func(*testing.T, parityCall) outcome{
		"grpc":     func(t *testing.T, c parityCall) outcome { return grpcParity(t, grpcCli, c) },
		"rest":     func(t *testing.T, c parityCall) outcome { return restParity(t, base, c) },
		"mcp":      func(t *testing.T, c parityCall) outcome { return mcpParity(t, base, c) },
		"connect":  func(t *testing.T, c parityCall) outcome { return connectParity(t, connectCli, c) },
		"grpc-web": func(t *testing.T, c parityCall) outcome { return connectParity(t, grpcWebCli, c) },
	}}
}

// restRefusal is the HTTP status and Retry-After of a REST call.
func restRefusal(t *testing.T, base, key string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/tools/echo:invoke", strings.NewReader(`{"arguments": {"mode": "user"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(body)
}

// TestQuotaSharedByReplicas: two gateways count one quota in one Redis —
// 10 calls a minute for alice on echo — whichever gateway and door each
// call takes: the 11th is refused wherever it goes, in each door's form
// of RESOURCE_EXHAUSTED with a retry delay, while bob is not held back.
// Then Redis stops: the gateway that fails open lets calls through, the
// one that fails closed refuses them with UNAVAILABLE, and both count the
// store's errors.
func TestQuotaSharedByReplicas(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	reg := write("registry.yaml", fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, service: echo-service}\n", env.echoTopic))
	keys := write("keys.yaml", fmt.Sprintf("keys:\n  - {hash: %q, user: alice}\n  - {hash: %q, user: bob}\n",
		auth.HashKey(quotaAliceKey), auth.HashKey(quotaBobKey)))
	rules := write("quota.yaml", `rules:
  - {name: alice-echo, users: ["api-key:alice"], tools: [echo], calls: 10, per: minute}
`)
	common := []string{"--registry", reg, "--api-keys", keys, "--quota-rules", rules, "--quota-redis-url", srv.URL}
	open := newQuotaGateway(t, "fail-open", append(common, "--quota-redis-failure", "open")...)
	closed := newQuotaGateway(t, "fail-closed", append(common, "--quota-redis-failure", "closed")...)
	gws := []*quotaGateway{open, closed}
	doors := []string{"grpc", "rest", "mcp", "connect", "grpc-web"}
	alice := parityCall{key: quotaAliceKey, tool: "echo", args: `{"mode": "user"}`}
	bob := parityCall{key: quotaBobKey, tool: "echo", args: `{"mode": "user"}`}

	// Ten calls, spread over both gateways and every door.
	for i := range 10 {
		gw, door := gws[i%2], doors[i%len(doors)]
		if got := gw.doors[door](t, alice); got.code != codes.OK || got.output != "alice" {
			t.Fatalf("call %d (%s, %s): %v, want OK", i+1, gw.name, door, got)
		}
	}
	// The 11th is refused on either gateway, through every door.
	for _, gw := range gws {
		for _, door := range doors {
			got := gw.doors[door](t, alice)
			if got.code != codes.ResourceExhausted || got.reason != "QUOTA_EXCEEDED" {
				t.Errorf("%s, %s: %v, want RESOURCE_EXHAUSTED/QUOTA_EXCEEDED", gw.name, door, got)
			}
		}
		code, retry, body := restRefusal(t, gw.base, quotaAliceKey)
		if code != http.StatusTooManyRequests || retry == "" || !strings.Contains(body, "RetryInfo") {
			t.Errorf("%s REST: HTTP %d, Retry-After %q, %s; want 429 with Retry-After and a RetryInfo", gw.name, code, retry, body)
		}
		// bob has no quota.
		for _, door := range doors {
			if got := gw.doors[door](t, bob); got.code != codes.OK || got.output != "bob" {
				t.Errorf("bob on %s, %s: %v, want OK", gw.name, door, got)
			}
		}
		if n := metric(t, gw.admin, "toolgate_quota_refused_total"); n < 1 {
			t.Errorf("%s: toolgate_quota_refused_total %v, want refusals counted", gw.name, n)
		}
	}
	// A gRPC refusal carries its RetryInfo.
	{
		st := status.Convert(grpcRaw(t, open, quotaAliceKey))
		if st.Code() != codes.ResourceExhausted || retryDelay(st) <= 0 || retryDelay(st) > time.Minute {
			t.Errorf("gRPC refusal %v, retry %v: want RESOURCE_EXHAUSTED with the rest of the minute", st, retryDelay(st))
		}
	}

	// Redis goes away.
	srv.Stop()
	for _, door := range doors {
		if got := open.doors[door](t, alice); got.code != codes.OK {
			t.Errorf("fail open, %s, Redis stopped: %v, want the call let through", door, got)
		}
		if got := closed.doors[door](t, alice); got.code != codes.Unavailable || got.reason != "QUOTA_UNAVAILABLE" {
			t.Errorf("fail closed, %s, Redis stopped: %v, want UNAVAILABLE/QUOTA_UNAVAILABLE", door, got)
		}
		// Calls no rule applies to never ask the store.
		if got := closed.doors[door](t, bob); got.code != codes.OK {
			t.Errorf("fail closed, %s, Redis stopped, bob: %v, want OK", door, got)
		}
	}
	if code, retry, _ := restRefusal(t, closed.base, quotaAliceKey); code != http.StatusServiceUnavailable || retry == "" {
		t.Errorf("fail closed REST: HTTP %d, Retry-After %q; want 503 with Retry-After", code, retry)
	}
	for _, gw := range gws {
		if n := metric(t, gw.admin, "toolgate_quota_store_errors_total"); n < float64(len(doors)) {
			t.Errorf("%s: toolgate_quota_store_errors_total %v, want every call Redis missed counted", gw.name, n)
		}
	}
	if n := metric(t, open.admin, "toolgate_quota_failed_open_total"); n < float64(len(doors)) {
		t.Errorf("fail open: toolgate_quota_failed_open_total %v", n)
	}
}

// grpcRaw is a gRPC call's error, whole.
func grpcRaw(t *testing.T, gw *quotaGateway, key string) error {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
	_, err := gw.grpc.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo"})
	return err
}

func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}
