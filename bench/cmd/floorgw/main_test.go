package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pulsar-client-go v0.19: a closed producer's send-timeout goroutine
		// only notices the close when its timer (SendTimeout) next fires.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
	)
}

func TestAppendStruct(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]map[string]any{
		"empty":   {},
		"string":  {"msg": "hello"},
		"escapes": {"q\"k": "a\"b\\c\nd\te\x01f", "ü": "ß€😀"},
		"numbers": {"i": 42, "f": -0.5, "big": 1e300, "small": 1e-7},
		"nested":  {"o": map[string]any{"l": []any{1, "two", true, nil, map[string]any{"x": false}}}, "n": nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := structpb.NewStruct(in)
			if err != nil {
				t.Fatal(err)
			}
			b := appendStruct(nil, s)
			var got any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("not JSON: %s: %v", b, err)
			}
			want := any(s.AsMap())
			wb, _ := json.Marshal(want)
			_ = json.Unmarshal(wb, &want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %s, want %s", b, wb)
			}
		})
	}
	if b := appendStruct(nil, nil); string(b) != "{}" {
		t.Fatalf("nil struct: got %s, want {}", b)
	}
}

// TestForwarder runs the floor against the real broker and the echo
// service: unary and streamed over gRPC, unary over REST, a bad REST body,
// and the allocation counter on /metrics.
func TestForwarder(t *testing.T) {
	brokertest.RequirePulsar(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	topic := brokertest.UniqueTopic("floorgw")
	svc, err := toolservice.New(toolservice.Config{ID: topic, Topic: topic, PulsarURL: brokertest.PulsarURL(), MaxConcurrency: 64, Logger: log}, echo.Handle)
	if err != nil {
		t.Fatal(err)
	}
	svcDone := make(chan error, 1)
	sctx, stopSvc := context.WithCancel(ctx)
	go func() { svcDone <- svc.Run(sctx) }()
	defer func() {
		stopSvc()
		if err := <-svcDone; err != nil {
			t.Errorf("echo service: %v", err)
		}
	}()
	for brokertest.Subscriptions(wire.RequestTopic(topic)) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the echo service never subscribed")
		case <-time.After(50 * time.Millisecond):
		}
	}

	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFloor := context.WithCancel(ctx)
	floorDone := make(chan error, 1)
	go func() {
		floorDone <- serve(fctx, options{pulsarURL: brokertest.PulsarURL(), topic: topic, user: "anonymous", queue: 1000}, log, gl, hl)
	}()
	defer func() {
		stopFloor()
		if err := <-floorDone; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	base := "http://" + hl.Addr().String()
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("floorgw never became ready")
		case <-time.After(50 * time.Millisecond):
		}
	}

	conn, err := grpc.NewClient("passthrough:///"+gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := toolgatev1.NewToolServiceClient(conn)
	args, _ := structpb.NewStruct(map[string]any{"msg": `say "hi"`})
	resp, err := client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args})
	if err != nil {
		t.Fatalf("InvokeTool: %v", err)
	}
	if resp.GetOutput() != `say "hi"` {
		t.Fatalf("InvokeTool: got %q", resp.GetOutput())
	}

	sargs, _ := structpb.NewStruct(map[string]any{"mode": "stream", "n": 50})
	st, err := client.StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: "echo", Arguments: sargs})
	if err != nil {
		t.Fatalf("StreamTool: %v", err)
	}
	n := 0
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("StreamTool chunk %d: %v", n, err)
		}
		if m.GetIndex() != int64(n) {
			t.Fatalf("chunk %d has index %d", n, m.GetIndex())
		}
		n++
	}
	if n != 50 {
		t.Fatalf("StreamTool: %d chunks, want 50", n)
	}

	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(bytes.TrimSpace(b))
	}
	if code, body := post("/v1/tools/echo:invoke", `{"arguments":{"msg":"over rest"}}`); code != http.StatusOK || body != `{"output":"over rest"}` {
		t.Fatalf("REST invoke: %d %s", code, body)
	}
	if code, body := post("/v1/tools/echo:invoke", `{"arguments":`); code != http.StatusBadRequest {
		t.Fatalf("REST invoke with a broken body: %d %s, want 400", code, body)
	}
	if code, body := post("/v1/tools/echo", `{}`); code != http.StatusNotFound {
		t.Fatalf("REST without :invoke: %d %s, want 404", code, body)
	}

	mresp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, name := range []string{"go_memstats_mallocs_total", "go_gc_duration_seconds_count"} {
		if !strings.Contains(string(mb), "\n"+name+" ") {
			t.Fatalf("/metrics has no %s:\n%s", name, mb)
		}
	}
}

// --pprof-addr serves the runtime's profiles on a listener of their own.
func TestServePprof(t *testing.T) {
	l, err := servePprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + l.Addr().String() + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/debug/pprof/cmdline: HTTP %d", resp.StatusCode)
	}
}
