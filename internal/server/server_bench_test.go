package server

import (
	"context"
	"fmt"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/protobuf/types/known/structpb"
)

// The argument shapes benchmarked: the benchmark's echo call, a typical
// tool call, and a large nested one.
func benchArgs(b *testing.B) map[string]*structpb.Struct {
	mk := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	big := map[string]any{}
	for i := range 100 {
		big[fmt.Sprintf("field%03d", i)] = map[string]any{"name": "value with \"quotes\" and ünïcode", "n": float64(i), "ok": i%2 == 0, "list": []any{1.5, "x", nil}}
	}
	return map[string]*structpb.Struct{
		"echo-msg": mk(map[string]any{"msg": "abcdefghijklmnopqrstuvwxyz012345"}),
		"typical": mk(map[string]any{
			"query": "What is the capital of France?", "limit": float64(10), "threshold": 0.75,
			"verbose": true, "filters": map[string]any{"lang": "en", "tags": []any{"geo", "europe"}},
		}),
		"nested-100": mk(big),
	}
}

func benchArgTool(strict bool) *registry.Tool {
	return &registry.Tool{Name: "bench", Strict: strict, Arguments: []registry.Argument{
		{Name: "msg", Type: "string"},
		{Name: "query", Type: "string"},
		{Name: "limit", Type: "integer"},
		{Name: "threshold", Type: "number"},
		{Name: "verbose", Type: "boolean"},
		{Name: "filters", Type: "object"},
	}}
}

// BenchmarkEncodeArguments is argument validation against the tool's
// declared arguments plus their encoding into the envelope's JSON string.
func BenchmarkEncodeArguments(b *testing.B) {
	args := benchArgs(b)
	for _, name := range []string{"echo-msg", "typical", "nested-100"} {
		for _, strict := range []bool{false, true} {
			if strict && name == "nested-100" {
				continue // undeclared fields: rejected at once
			}
			b.Run(fmt.Sprintf("%s/strict=%v", name, strict), func(b *testing.B) {
				t, a := benchArgTool(strict), args[name]
				b.ReportAllocs()
				for b.Loop() {
					if _, err := encodeArguments(t, a); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkParseOutput is building InvokeToolResponse.output_json from a
// reply: plain text (rejected cheaply) and a small JSON object.
func BenchmarkParseOutput(b *testing.B) {
	for name, text := range map[string]string{
		"text": "abcdefghijklmnopqrstuvwxyz012345",
		"json": `{"answer": "Paris", "score": 0.98, "sources": ["a", "b"]}`,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				parseJSONValue(text)
			}
		})
	}
}

// answering is a broker that answers every request at once, inside
// Publish, with reply.
func answering(reply []byte) *transporttest.Fake {
	f := &transporttest.Fake{}
	f.OnPublish = func(_ string, m transport.Message) error {
		f.Deliver(transport.Message{Payload: reply, Properties: map[string]string{wire.PropID: m.Properties[wire.PropID]}})
		return nil
	}
	return f
}

// BenchmarkInvokeTool is the gateway's whole in-process hot path for one
// unary call, without gRPC's transport and without Pulsar: registry
// lookup, argument checks and encoding, deadline, envelope, bridge call,
// reply routing, response message.
func BenchmarkInvokeTool(b *testing.B) {
	snap, err := registry.Parse("bench.yaml", []byte(`
tool-service:
  echo-service: {id: echo-service, topic: bench-echo, config-params: []}
tool:
  echo:
    type: tool-service
    name: echo
    description: echo
    service: echo-service
    arguments: [{name: msg, type: string, description: text}]
`), nil)
	if err != nil {
		b.Fatal(err)
	}
	reply := wire.EncodeResponse(wire.Response{Response: "abcdefghijklmnopqrstuvwxyz012345", EndOfStream: true})
	br := bridge.New(answering(reply), bridge.Options{})
	defer br.Close()
	srv := New(registry.New(snap), br, Options{})
	args, _ := structpb.NewStruct(map[string]any{"msg": "abcdefghijklmnopqrstuvwxyz012345"})
	req := &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := srv.InvokeTool(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			if resp.GetOutput() != "abcdefghijklmnopqrstuvwxyz012345" {
				b.Error("wrong output")
				return
			}
		}
	})
}
