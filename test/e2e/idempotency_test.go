package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/redistest"
	"github.com/toolgate/toolgate/toolservice"
	"google.golang.org/grpc/codes"
)

// runs is a tool service that counts what it runs: each call answers
// "<say> #<n>", n its run's number, so that an answer given twice is
// told from a call run twice; {"hold": true} waits until release.
type runs struct {
	mu      sync.Mutex
	n       int
	release chan struct{}
}

func (r *runs) handle(ctx context.Context, req *toolservice.Request) (any, error) {
	r.mu.Lock()
	r.n++
	n := r.n
	r.mu.Unlock()
	if hold, _ := req.Arguments["hold"].(bool); hold {
		select {
		case <-r.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	say, _ := req.Arguments["say"].(string)
	return fmt.Sprintf("%s #%d", say, n), nil
}

func (r *runs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// TestIdempotencyKeys: two gateways share one Redis for their idempotency
// keys. A call sent again with its key — to either gateway, through any
// door — is answered with the first call's answer and the service runs it
// once; a second call while the first runs joins it; the same key with
// other arguments is refused (409 on REST, ALREADY_EXISTS elsewhere);
// another caller's key of the same text is its own.
func TestIdempotencyKeys(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	svc := &runs{release: make(chan struct{})}
	topic := brokertest.UniqueTopic("idempotent")
	ts, err := toolservice.New(toolservice.Config{ID: "counter-service", Topic: topic, PulsarURL: brokertest.PulsarURL(),
		Logger: slog.New(slog.DiscardHandler)}, svc.handle)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ts.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("tool service: %v", err)
		}
	})
	if err := waitSubscribed("non-persistent://tg/request/"+topic, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	reg := write("registry.yaml", fmt.Sprintf("tool-service:\n  counter-service: {topic: %s}\ntool:\n  counter: {type: tool-service, service: counter-service}\n", topic))
	keys := write("keys.yaml", fmt.Sprintf("keys:\n  - {hash: %q, user: alice}\n  - {hash: %q, user: bob}\n",
		auth.HashKey(quotaAliceKey), auth.HashKey(quotaBobKey)))
	common := []string{"--registry", reg, "--api-keys", keys, "--idempotency-redis-url", srv.URL}
	gws := []*quotaGateway{newQuotaGateway(t, "a", common...), newQuotaGateway(t, "b", common...)}
	doors := []string{"rest", "grpc", "mcp", "connect", "grpc-web"}
	with := func(key, args string) parityCall {
		return parityCall{key: quotaAliceKey, tool: "counter", args: args, headers: map[string]string{"Idempotency-Key": key}}
	}

	// One call, then the same again on both gateways through every door:
	// the first's answer each time, one run.
	first := gws[0].doors["rest"](t, with("key-1", `{"say": "a"}`))
	if first.code != codes.OK || first.output != "a #1" {
		t.Fatalf("first call: %v, want a #1", first)
	}
	for _, gw := range gws {
		for _, door := range doors {
			if got := gw.doors[door](t, with("key-1", `{"say":"a"}`)); got.code != codes.OK || got.output != "a #1" {
				t.Errorf("%s, %s: %v, want the first call's answer a #1", gw.name, door, got)
			}
		}
	}
	// A stream with the key is answered from the same call.
	streamed := with("key-1", `{"say": "a"}`)
	streamed.stream = true
	if got := gws[1].doors["rest"](t, streamed); got.code != codes.OK || got.output != "a #1" {
		t.Errorf("stream: %v, want a #1", got)
	}
	if n := svc.count(); n != 1 {
		t.Fatalf("the service ran %d calls, want 1", n)
	}

	// The key with other arguments: refused everywhere, nothing run.
	for _, gw := range gws {
		for _, door := range doors {
			if got := gw.doors[door](t, with("key-1", `{"say": "b"}`)); got.code != codes.AlreadyExists || got.reason != "IDEMPOTENCY_KEY_REUSED" {
				t.Errorf("%s, %s, other arguments: %v, want ALREADY_EXISTS IDEMPOTENCY_KEY_REUSED", gw.name, door, got)
			}
		}
		code, _, body := restWithKey(t, gw.base, quotaAliceKey, "key-1", `{"say": "b"}`)
		if code != http.StatusConflict || !strings.Contains(body, "IDEMPOTENCY_KEY_REUSED") {
			t.Errorf("%s REST, other arguments: HTTP %d %s; want 409 IDEMPOTENCY_KEY_REUSED", gw.name, code, body)
		}
	}
	if n := svc.count(); n != 1 {
		t.Fatalf("the service ran %d calls, want 1", n)
	}

	// bob's key-1 is his own.
	bob := with("key-1", `{"say": "a"}`)
	bob.key = quotaBobKey
	if got := gws[1].doors["grpc"](t, bob); got.code != codes.OK || got.output != "a #2" {
		t.Fatalf("bob: %v, want a #2 (a call of his own)", got)
	}

	// Concurrent calls: the first holds on gateway a; the others, on both
	// gateways, wait for it and get its answer.
	held := with("key-2", `{"say": "c", "hold": true}`)
	type answer struct {
		name string
		got  outcome
	}
	answers := make(chan answer, 5)
	go func() { answers <- answer{"a/rest (first)", gws[0].doors["rest"](t, held)} }()
	eventually.True(t, 30*time.Second, "the first held call runs", func() bool { return svc.count() == 3 })
	joiners := []struct{ gw, door string }{{"a", "grpc"}, {"b", "rest"}, {"b", "mcp"}, {"b", "connect"}}
	for _, j := range joiners {
		gw := gws[0]
		if j.gw == "b" {
			gw = gws[1]
		}
		go func() { answers <- answer{j.gw + "/" + j.door, gw.doors[j.door](t, held)} }()
	}
	eventually.True(t, 30*time.Second, "the second calls wait on both gateways", func() bool {
		return metric(t, gws[0].admin, "toolgate_idempotency_waiting") == 1 && metric(t, gws[1].admin, "toolgate_idempotency_waiting") == 3
	})
	close(svc.release)
	for range 1 + len(joiners) {
		a := <-answers
		if a.got.code != codes.OK || a.got.output != "c #3" {
			t.Errorf("%s: %v, want the first call's answer c #3", a.name, a.got)
		}
	}
	if n := svc.count(); n != 3 {
		t.Fatalf("the service ran %d calls, want 3", n)
	}
	if n := metric(t, gws[1].admin, "toolgate_idempotency_calls_total"); n < 1 {
		t.Errorf("toolgate_idempotency_calls_total %v on b, want calls counted", n)
	}

	// Redis stops: a call with a key is refused, not run — 503 with
	// Retry-After on REST, UNAVAILABLE elsewhere; a call without a key runs.
	srv.Stop()
	code, retry, body := restWithKey(t, gws[0].base, quotaAliceKey, "key-3", `{"say": "d"}`)
	if code != http.StatusServiceUnavailable || retry == "" || !strings.Contains(body, "IDEMPOTENCY_STORE_UNAVAILABLE") {
		t.Errorf("Redis stopped, REST: HTTP %d, Retry-After %q, %s; want 503 IDEMPOTENCY_STORE_UNAVAILABLE with Retry-After", code, retry, body)
	}
	if got := gws[1].doors["grpc"](t, with("key-3", `{"say": "d"}`)); got.code != codes.Unavailable || got.reason != "IDEMPOTENCY_STORE_UNAVAILABLE" {
		t.Errorf("Redis stopped, gRPC: %v, want UNAVAILABLE IDEMPOTENCY_STORE_UNAVAILABLE", got)
	}
	if n := svc.count(); n != 3 {
		t.Fatalf("the service ran %d calls, want 3: none with a key while Redis is away", n)
	}
	if got := gws[1].doors["rest"](t, parityCall{key: quotaAliceKey, tool: "counter", args: `{"say": "e"}`}); got.code != codes.OK || got.output != "e #4" {
		t.Errorf("Redis stopped, no key: %v, want e #4", got)
	}
	if n := metric(t, gws[0].admin, "toolgate_idempotency_calls_total{outcome=\"store_error\"}"); n != 1 {
		t.Errorf("store errors on a: %v, want 1", n)
	}
}

// restWithKey is a REST :invoke with an idempotency key: the HTTP status,
// Retry-After and body.
func restWithKey(t *testing.T, base, apiKey, key, args string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/tools/counter:invoke", bytes.NewReader([]byte(`{"arguments": `+args+`}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", apiKey)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(body)
}
