package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// watched is a Go SDK tool service (the echo service) that notes, per
// call (its "tag" argument), when the handler started and when and why
// its context ended.
type watched struct {
	mu      sync.Mutex
	started map[string]time.Time
	ended   map[string]ctxEnd
	svc     *toolservice.Service
}

type ctxEnd struct {
	at    time.Time
	cause error
}

func (w *watched) handle(ctx context.Context, r *toolservice.Request) (any, error) {
	tag, _ := r.Arguments["tag"].(string)
	w.mu.Lock()
	w.started[tag] = time.Now()
	w.mu.Unlock()
	// Not context.AfterFunc with a deferred stop: a handler that returns
	// because ctx is done can stop the callback before the cancellation
	// reaches it. A context still live at return ends later by itself,
	// which is not recorded.
	live := make(chan struct{})
	defer func() {
		if ctx.Err() == nil {
			close(live)
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			w.ended[tag] = ctxEnd{time.Now(), context.Cause(ctx)}
			w.mu.Unlock()
		case <-live:
		}
	}()
	return echo.Handle(ctx, r)
}

// has reports, under w's lock, whether cond holds.
func (w *watched) has(cond func() bool) func() bool {
	return func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return cond()
	}
}

// TestCancelReachesTheService: a call given up at the gateway — by MCP
// notifications/cancelled in both eras, by a REST or gRPC client going
// away — ends the handler's context at the Go tool service (cause
// toolservice.ErrCallerGone), for a 60 s unary call and a 60 s stream,
// long before their end or the gateway's 20 s deadline; without it the
// service would run each on. The latency is logged, not asserted.
func TestCancelReachesTheService(t *testing.T) {
	t.Parallel()
	topic := brokertest.UniqueTopic("watched")
	w := &watched{started: map[string]time.Time{}, ended: map[string]ctxEnd{}}
	svc, err := toolservice.New(toolservice.Config{ID: topic, Topic: topic, PulsarURL: brokertest.PulsarURL(), StopGrace: time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}, w.handle)
	if err != nil {
		t.Fatal(err)
	}
	w.svc = svc
	brokertest.RunService(t, topic, svc, time.Minute)
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, []byte(fmt.Sprintf(`tool-service:
  watched:
    topic: %s
tool:
  slow:
    type: tool-service
    description: the echo service, watched
    service: watched
`, topic)), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := runGateway(t, nil, "--pulsar-admin-url", brokertest.AdminURL(), "--registry", reg, "--announcements=false", "--allow-anonymous", "--default-timeout", "20s")
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	grpcClient := toolgatev1.NewToolServiceClient(conn)

	const (
		unary  = `"mode":"sleep","ms":60000`
		stream = `"mode":"stream","n":300,"gap_ms":200`
	)
	// mcpCall starts a tools/call in the era given, and returns the function
	// that gives it up with notifications/cancelled and the body of the
	// call's own response, once it has ended.
	mcpCall := func(t *testing.T, modern bool, id int, args string, streamed bool) (func(), <-chan string) {
		meta := ""
		var metas []string
		if streamed {
			metas = append(metas, `"progressToken":"p`+fmt.Sprint(id)+`"`)
		}
		if modern {
			metas = append(metas, `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}`)
		}
		if len(metas) > 0 {
			meta = `,"_meta":{` + strings.Join(metas, ",") + `}`
		}
		header := map[string]string{"Mcp-Protocol-Version": "2025-11-25"}
		if modern {
			header = map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "slow"}
		}
		send := func(body string) *http.Response {
			req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return nil
			}
			return resp
		}
		answer := make(chan string, 1)
		go func() {
			var b []byte
			if resp := send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow","arguments":{%s}%s}}`, id, args, meta)); resp != nil {
				b, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			answer <- string(b)
		}()
		return func() {
			if modern {
				header["Mcp-Method"] = "notifications/cancelled"
				delete(header, "Mcp-Name")
			}
			resp := send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"test"%s}}`, id, strings.Replace(meta, `"progressToken":"p`+fmt.Sprint(id)+`",`, "", 1)))
			if resp != nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Errorf("notifications/cancelled: HTTP %d, want 202", resp.StatusCode)
				}
			}
		}, answer
	}
	// restCall starts a call on :invoke or :stream and returns the
	// function that closes its connection.
	restCall := func(t *testing.T, args string, streamed bool) func() {
		ctx, cancel := context.WithCancel(t.Context())
		path := ":invoke"
		if streamed {
			path = ":stream"
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tools/slow"+path, strings.NewReader(`{"arguments":{`+args+`}}`))
		req.Header.Set("Content-Type", "application/json")
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
				}
				resp.Body.Close()
			}
		}()
		return cancel
	}
	grpcCall := func(t *testing.T, args string, streamed bool) func() {
		ctx, cancel := context.WithCancel(t.Context())
		var m map[string]any
		if err := json.Unmarshal([]byte("{"+args+"}"), &m); err != nil {
			t.Fatal(err)
		}
		s, _ := structpb.NewStruct(m)
		go func() {
			if streamed {
				st, err := grpcClient.StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: "slow", Arguments: s})
				for err == nil {
					_, err = st.Recv()
				}
				return
			}
			_, _ = grpcClient.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "slow", Arguments: s})
		}()
		return cancel
	}

	id := 0
	for _, door := range []string{"mcp 2025-11-25", "mcp 2026-07-28", "rest", "grpc"} {
		for _, kind := range []string{"unary", "stream"} {
			t.Run(door+" "+kind, func(t *testing.T) {
				id++
				tag := fmt.Sprintf("%s %s %d", door, kind, id)
				streamed := kind == "stream"
				args := unary
				if streamed {
					args = stream
				}
				args += `,"tag":"` + tag + `"`
				replies0 := metric(t, "http://"+gw.AdminAddr(), "toolgate_bridge_replies_total")
				var giveUp func()
				var answer <-chan string
				switch door {
				case "mcp 2025-11-25":
					giveUp, answer = mcpCall(t, false, id, args, streamed)
				case "mcp 2026-07-28":
					giveUp, answer = mcpCall(t, true, id, args, streamed)
				case "rest":
					giveUp = restCall(t, args, streamed)
				case "grpc":
					giveUp = grpcCall(t, args, streamed)
				}
				eventually.True(t, 10*time.Second, "the call reaches the service", w.has(func() bool { _, ok := w.started[tag]; return ok }))
				if streamed { // give up once its first chunks came
					eventually.True(t, 10*time.Second, "the stream's first chunks delivered", func() bool {
						return metric(t, "http://"+gw.AdminAddr(), "toolgate_bridge_replies_total")-replies0 >= 2
					})
				}
				gaveUp := time.Now()
				giveUp()
				eventually.True(t, 15*time.Second, "the service's context ends after the caller gave up", w.has(func() bool { _, ok := w.ended[tag]; return ok }))
				w.mu.Lock()
				end := w.ended[tag]
				w.mu.Unlock()
				took := end.at.Sub(gaveUp)
				t.Logf("the service's context ended %v after the caller gave up (cause: %v)", took.Round(time.Millisecond), end.cause)
				if !errors.Is(end.cause, toolservice.ErrCallerGone) {
					t.Errorf("cause %v, want toolservice.ErrCallerGone", end.cause)
				}
				if answer != nil {
					// A cancelled request is not answered: its response
					// ends without a result or an error for its id.
					select {
					case body := <-answer:
						if strings.Contains(body, fmt.Sprintf(`"id":%d,`, id)) {
							t.Errorf("the cancelled request was answered: %s", body)
						}
					case <-t.Context().Done():
					}
				}
			})
		}
	}
	// The service counts a cancel just after it ends the context.
	eventually.True(t, 10*time.Second, "the service counts 8 calls given up", func() bool { return svc.Stats().Cancelled >= 8 })
	if n := svc.Stats().Cancelled; n != 8 {
		t.Errorf("the service counted %d calls given up, want 8", n)
	}
}
