package shutdown

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// The bounds under test: with the broker known to be away a call is
// refused within downAnswer; every call is answered by its deadline and
// deadlineSlack.
const (
	downAnswer    = time.Second
	callTimeout   = 3 * time.Second
	deadlineSlack = time.Second
)

// answer is how a call over HTTP ended: its status, its ErrorInfo's
// reason or MCP's error type, and, for an operation, its deadline.
type answer struct {
	door     string
	sent     time.Time
	took     time.Duration
	status   int // HTTP status, or the gRPC code's for gRPC
	reason   string
	deadline time.Time // an operation's, when it answered one
	err      string    // the request could not be made
}

func (a answer) String() string {
	s := fmt.Sprintf("%s: %d %s after %v", a.door, a.status, a.reason, a.took.Round(time.Millisecond))
	if a.err != "" {
		s += " (" + a.err + ")"
	}
	if !a.deadline.IsZero() {
		s += fmt.Sprintf(", operation's deadline %v after it was sent", a.deadline.Sub(a.sent).Round(time.Millisecond))
	}
	return s
}

// post sends body to url and reads the answer: the HTTP status, the
// ErrorInfo's reason of an error, an operation's deadline.
func post(door, url, body string, header map[string]string) answer {
	a := answer{door: door, sent: time.Now()}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		a.err = err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := http.Client{Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		a.took, a.err = time.Since(a.sent), err.Error()
		return a
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.took, a.status = time.Since(a.sent), resp.StatusCode
	if i := bytes.Index(b, []byte("data: ")); i >= 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b = b[i+len("data: "):] // MCP's answer as an event
	}
	var v struct {
		Details []struct {
			Reason string `json:"reason"`
		} `json:"details"`
		Metadata struct {
			Deadline time.Time `json:"deadline"`
		} `json:"metadata"`
		Result struct {
			IsError    bool `json:"isError"`
			Structured struct {
				Error struct {
					Type, Code string
				} `json:"error"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	// A stream's NDJSON or an error: the first line is enough.
	line, _, _ := bytes.Cut(b, []byte("\n"))
	if err := json.Unmarshal(line, &v); err != nil {
		a.err = fmt.Sprintf("not JSON: %.200q", b)
		return a
	}
	for _, d := range v.Details {
		if d.Reason != "" {
			a.reason = d.Reason
		}
	}
	if e := v.Result.Structured.Error; v.Result.IsError {
		a.reason = e.Type
	}
	a.deadline = v.Metadata.Deadline
	return a
}

// TestCallsWhileTheBrokerIsDown stops the test's broker under a gateway
// with --operations and an echo service, and starts it again: while the
// broker is known to be away, a call of every kind — REST :invoke,
// :stream and :start, gRPC StartTool, an MCP task — is answered within
// downAnswer with UNAVAILABLE (BROKER_UNAVAILABLE); and of the operations
// started every 100 ms all along, none is answered after its deadline and
// deadlineSlack, nor with an operation whose deadline has passed.
func TestCallsWhileTheBrokerIsDown(t *testing.T) {
	b, gwBin, topic := ownBrokerWithEcho(t, "brokerdown")
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, fmt.Appendf(nil, "tool-service:\n  echo-service: {topic: %s}\ntool:\n"+
		"  echo: {type: tool-service, service: echo-service}\n"+
		"  echo-task: {type: tool-service, service: echo-service, task-support: optional}\n", topic), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, gwBin, "gateway", "brokerdown", b.broker,
		append(brokertest.TestOperations(t).Flags(), "--registry", reg, "--announcements=false")...)
	gw.ready(t, "echo")
	base := "http://" + gw.http
	body := `{"arguments": {"msg": "hi"}, "timeout": "` + callTimeout.String() + `"}`
	eventually.Succeeds(t, 30*time.Second, "echo answers", func() error {
		if a := post("invoke", base+"/v1/tools/echo:invoke", body, nil); a.status != http.StatusOK {
			return fmt.Errorf("%v", a)
		}
		return nil
	})
	if a := post("start", base+"/v1/tools/echo:start", body, nil); a.status != http.StatusOK {
		t.Fatalf("an operation's start with the broker up: %v", a)
	}
	conn, err := grpc.NewClient(gw.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tools := toolgatev1.NewToolServiceClient(conn)
	mcpCall := func() answer {
		params := map[string]any{"name": "echo-task", "arguments": map[string]any{"msg": "hi"},
			"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
				"io.modelcontextprotocol/clientCapabilities": map[string]any{
					"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}}}
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
		return post("MCP task", base+"/mcp", string(req), map[string]string{"Accept": "application/json, text/event-stream",
			"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo-task"})
	}
	if a := mcpCall(); a.status != http.StatusOK || a.reason != "" {
		t.Fatalf("an MCP task with the broker up: %v", a)
	}

	// Operations are started all along, one every 100 ms: before the
	// broker goes, while it is away and once it is back.
	steadyCtx, stopSteady := context.WithCancel(t.Context())
	var steady []answer
	var steadyDone sync.WaitGroup
	steadyDone.Go(func() {
		for steadyCtx.Err() == nil {
			steady = append(steady, post("steady start", base+"/v1/tools/echo:start", body, nil))
			select {
			case <-steadyCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	defer func() { stopSteady(); steadyDone.Wait() }()

	b.stop(t)
	eventually.True(t, 30*time.Second, "the broker's port closed", func() bool { return !accepts("127.0.0.1:" + b.port) })
	eventually.True(t, 30*time.Second, "the gateway not ready", func() bool {
		resp, err := http.Get("http://" + gw.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})

	// Every door, three times, the broker known to be away.
	grpcStart := func() answer {
		a := answer{door: "gRPC StartTool", sent: time.Now()}
		args, _ := structpb.NewStruct(map[string]any{"msg": "hi"})
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		op, err := tools.StartTool(ctx, &toolgatev1.StartToolRequest{Name: "echo", Arguments: args, Timeout: durationpb.New(callTimeout)})
		a.took = time.Since(a.sent)
		st := status.Convert(err)
		a.status, a.reason = int(st.Code()), st.Code().String()
		if err == nil {
			a.reason = "operation " + op.GetName()
		}
		return a
	}
	var down []answer
	for range 3 {
		down = append(down,
			post("REST :invoke", base+"/v1/tools/echo:invoke", body, nil),
			post("REST :stream", base+"/v1/tools/echo:stream", body, nil),
			post("REST :start", base+"/v1/tools/echo:start", body, nil),
			grpcStart(),
			mcpCall())
	}
	for _, a := range down {
		t.Logf("broker down: %v", a)
		var ok bool
		switch a.door {
		case "gRPC StartTool":
			ok = a.status == int(codes.Unavailable)
		case "MCP task":
			ok = a.status == http.StatusOK && a.reason == "BROKER_UNAVAILABLE"
		default:
			ok = a.status == http.StatusServiceUnavailable && a.reason == "BROKER_UNAVAILABLE"
		}
		if !ok {
			t.Errorf("broker down: %v, want UNAVAILABLE (BROKER_UNAVAILABLE)", a)
		}
		if a.took > downAnswer {
			t.Errorf("broker down: %v, over %v", a, downAnswer)
		}
	}

	b.start(t)
	gw.ready(t, "echo")
	eventually.Succeeds(t, 60*time.Second, "operations start again", func() error {
		if a := post("start", base+"/v1/tools/echo:start", body, nil); a.status != http.StatusOK {
			return fmt.Errorf("%v", a)
		}
		return nil
	})
	stopSteady()
	steadyDone.Wait()

	// No start answered after its deadline, nor with an operation whose
	// deadline had passed.
	codesSeen := map[string]int{}
	var late []answer
	var slowest time.Duration
	for _, a := range steady {
		codesSeen[fmt.Sprintf("%d %s", a.status, a.reason)]++
		slowest = max(slowest, a.took)
		switch {
		case a.took > callTimeout+deadlineSlack:
			late = append(late, a)
		case a.status == http.StatusOK && !a.deadline.After(a.sent.Add(a.took)):
			late = append(late, a)
		}
	}
	keys := make([]string, 0, len(codesSeen))
	for k := range codesSeen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	t.Logf("%d starts over the broker's stop and start, the slowest answered after %v: %v", len(steady), slowest.Round(time.Millisecond), keys)
	for _, k := range keys {
		t.Logf("  %s: %d", k, codesSeen[k])
	}
	for i, a := range late {
		if i == 10 {
			t.Errorf("… and %d more", len(late)-10)
			break
		}
		t.Errorf("answered after the deadline (%v + %v), or with an operation past it: %v", callTimeout, deadlineSlack, a)
	}
	if len(late) > 0 {
		t.Errorf("%d of %d starts answered after their deadline or with an operation past it", len(late), len(steady))
	}
}

// ownBroker is a broker of the test's own, and whether it runs.
type ownBroker struct {
	broker
	up bool
}

func (b *ownBroker) stop(t *testing.T)  { b.script(t, "down"); b.up = false }
func (b *ownBroker) start(t *testing.T) { b.script(t, "up"); b.up = true }

// ownBrokerWithEcho starts a broker of the test's own — building the
// gateway and the echo service meanwhile — and an echo service on a new
// topic named after prefix. The broker is stopped when the test ends, if
// it runs then.
func ownBrokerWithEcho(t *testing.T, prefix string) (b *ownBroker, gwBin, topic string) {
	t.Helper()
	ports := brokertest.FreePorts(t, 2)
	b = &ownBroker{broker: broker{port: strconv.Itoa(ports[0]), web: strconv.Itoa(ports[1]), dataDir: t.TempDir()}}
	bins := t.TempDir()
	var echoBin string
	var built sync.WaitGroup
	built.Go(func() { gwBin = build(t, bins, "./cmd/gateway") })
	built.Go(func() { echoBin = build(t, bins, "./cmd/echo-service") })
	b.start(t)
	built.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() {
		if b.up {
			b.script(t, "down")
		}
		b.removeFiles(t)
	})
	topic = brokertest.UniqueTopic(prefix)
	start(t, "echo service", echoBin, "--pulsar-url", b.url(), "--id", topic, "--topic", topic)
	return b, gwBin, topic
}
