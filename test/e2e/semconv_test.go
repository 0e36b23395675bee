package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

// otlpSpan is a span as the test's OTLP receiver got it.
type otlpSpan struct {
	service, name                 string
	kind                          tracepb.Span_SpanKind
	traceID, spanID, parentSpanID string
	attrs                         map[string]string
}

// otlpReceiver is an OTLP/gRPC trace receiver that keeps every span.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []otlpSpan
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		svc := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				svc = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, a := range s.GetAttributes() {
					attrs[a.GetKey()] = a.GetValue().GetStringValue()
				}
				r.spans = append(r.spans, otlpSpan{service: svc, name: s.GetName(), kind: s.GetKind(),
					traceID: hex.EncodeToString(s.GetTraceId()), spanID: hex.EncodeToString(s.GetSpanId()),
					parentSpanID: hex.EncodeToString(s.GetParentSpanId()), attrs: attrs})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) all() []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]otlpSpan(nil), r.spans...)
}

// TestSemconvSpans: a gateway exporting to an in-test OTLP receiver, and
// a Go SDK tool service exporting to it too. A REST, a gRPC and an MCP
// call of one tool each give a server span with the GenAI attributes of
// tool execution (gen_ai.operation.name execute_tool, gen_ai.tool.name;
// the MCP one named "tools/call echo" with mcp.method.name tools/call),
// and the service's span continues each trace: a child of the gateway's
// publish span, itself a child of the server span, named "execute_tool
// echo" from the baggage the gateway sent.
func TestSemconvSpans(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &otlpReceiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, recv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	defer func() { srv.Stop(); <-done }()

	// The tool service, with its own tracer provider.
	exp, err := otlptracegrpc.New(t.Context(), otlptracegrpc.WithEndpoint(lis.Addr().String()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "echo-service"))))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	topic := brokertest.UniqueTopic("semconv")
	svc, err := toolservice.New(toolservice.Config{ID: "echo-service", Topic: topic, PulsarURL: brokertest.PulsarURL(), TracerProvider: tp}, echo.Handle)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopSvc := context.WithCancel(context.Background())
	svcDone := make(chan error, 1)
	go func() { svcDone <- svc.Run(sctx) }()
	defer func() {
		stopSvc()
		if err := <-svcDone; err != nil {
			t.Errorf("tool service: %v", err)
		}
	}()
	if err := waitSubscribed("non-persistent://tg/request/"+topic, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, []byte(fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, service: echo-service}\n", topic)), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := apptest.Start(t, nil, "--registry", reg, "--allow-anonymous", "--announcements=false",
		"--otlp-endpoint", lis.Addr().String(), "--otlp-insecure")
	base := "http://" + gw.HTTPAddr()
	gw.WaitReady(t, 30*time.Second)

	// REST
	resp, err := http.Post(base+"/v1/tools/echo:invoke", "application/json", strings.NewReader(`{"arguments": {"mode": "user"}}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("REST: HTTP %d", resp.StatusCode)
	}
	// gRPC
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	args, _ := structpb.NewStruct(map[string]any{"mode": "user"})
	if _, err := toolgatev1.NewToolServiceClient(conn).InvokeTool(metadata.NewOutgoingContext(t.Context(), nil),
		&toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args}); err != nil {
		t.Fatalf("gRPC: %v", err)
	}
	// MCP
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", bytes.NewReader([]byte(
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"mode":"user"}}}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("MCP: HTTP %d", resp.StatusCode)
	}
	// The gateway's spans leave with its batch at shutdown.
	if err := gw.Stop(); err != nil {
		t.Fatal(err)
	}

	type want struct{ door, name, rpc, mcp string }
	wants := []want{
		{"REST", "execute_tool echo", "toolgate.v1.ToolService/InvokeTool", ""},
		{"gRPC", "execute_tool echo", "toolgate.v1.ToolService/InvokeTool", ""},
		{"MCP", "tools/call echo", "mcp/InvokeTool", "tools/call"},
	}
	eventually.True(t, 30*time.Second, "every call's server span and the service's spans at the receiver", func() bool {
		servers, services := 0, 0
		for _, s := range recv.all() {
			if s.kind == tracepb.Span_SPAN_KIND_SERVER && s.attrs["gen_ai.tool.name"] == "echo" {
				servers++
			}
			if s.service == "echo-service" {
				services++
			}
		}
		return servers >= 3 && services >= 3
	})
	spans := recv.all()
	byID := map[string]otlpSpan{}
	for _, s := range spans {
		byID[s.spanID] = s
	}
	// A REST and a gRPC call have the same method: count them as two.
	seen := map[string]int{}
	for _, s := range spans {
		if s.kind != tracepb.Span_SPAN_KIND_SERVER || s.attrs["gen_ai.tool.name"] != "echo" {
			continue
		}
		seen[s.attrs["rpc.method"]]++
		if s.attrs["gen_ai.operation.name"] != "execute_tool" || s.attrs["gen_ai.tool.type"] != "extension" || s.service != "toolgate" {
			t.Errorf("server span %q: attributes %v of %s", s.name, s.attrs, s.service)
		}
		// The service's span in this trace: child of the publish span,
		// which is a child of this one.
		found := false
		for _, c := range spans {
			if c.service != "echo-service" || c.traceID != s.traceID {
				continue
			}
			pub, ok := byID[c.parentSpanID]
			if !ok || pub.parentSpanID != s.spanID || pub.kind != tracepb.Span_SPAN_KIND_PRODUCER {
				t.Errorf("service span %q's parent %+v, want the publish span under %q", c.name, pub, s.name)
			}
			if c.name != "execute_tool echo" || c.attrs["gen_ai.operation.name"] != "execute_tool" || c.attrs["gen_ai.tool.name"] != "echo" ||
				c.attrs["messaging.system"] != "pulsar" || c.kind != tracepb.Span_SPAN_KIND_CONSUMER {
				t.Errorf("service span %q: %v", c.name, c.attrs)
			}
			found = true
		}
		if !found {
			t.Errorf("no service span in the trace of %q", s.name)
		}
	}
	for _, w := range wants {
		ok := false
		for _, s := range spans {
			if s.kind == tracepb.Span_SPAN_KIND_SERVER && s.name == w.name && s.attrs["rpc.method"] == w.rpc && s.attrs["mcp.method.name"] == w.mcp {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s: no server span %q with rpc.method %s and mcp.method.name %q", w.door, w.name, w.rpc, w.mcp)
		}
	}
	if seen["toolgate.v1.ToolService/InvokeTool"] != 2 || seen["mcp/InvokeTool"] != 1 {
		t.Errorf("server spans by method %v, want 2 InvokeTool (REST, gRPC) and 1 mcp/InvokeTool", seen)
	}
}
