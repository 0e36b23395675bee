package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// serviceSaw is what the Go SDK handed the tool service's handler.
type serviceSaw struct {
	span        trace.SpanContext // the span context of the handler's ctx
	traceparent string            // the request message's property
}

// bridgeChain is a call chain whose last handler publishes the call
// through the real bridge, with the publish hook the gateway installs
// (TracePublish), to a tool service the Go SDK runs on br; the service's handler starts a
// span of its own when tp is set, and tells what it saw on the returned
// channel.
func bridgeChain(t *testing.T, br transport.Broker, tp trace.TracerProvider, mw toolcall.Middleware) (toolcall.Handler, <-chan serviceSaw) {
	t.Helper()
	topic := brokertest.UniqueTopic("telemetry")
	saw := make(chan serviceSaw, 1)
	svc, err := toolservice.New(toolservice.Config{ID: topic, Topic: topic, StopGrace: time.Second, Logger: slog.New(slog.DiscardHandler)},
		func(ctx context.Context, req *toolservice.Request) (any, error) {
			if tp != nil {
				var span trace.Span
				ctx, span = tp.Tracer("service").Start(ctx, "process", trace.WithSpanKind(trace.SpanKindConsumer))
				defer span.End()
			}
			saw <- serviceSaw{span: trace.SpanContextFromContext(ctx), traceparent: req.Properties["traceparent"]}
			return "done", nil
		}, toolservice.WithPulsarClient(transporttest.PulsarClient(br)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stopped := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); stopped <- svc.Run(ctx) }()
	b := bridge.New(br, bridge.Options{OnPublish: TracePublish})
	t.Cleanup(func() {
		b.Close()
		cancel()
		wg.Wait()
	})
	target := bridge.Target{RequestTopic: wire.RequestTopic(topic), ResponseTopic: wire.ResponseTopic(topic)}
	if err := b.Listen(t.Context(), target.ResponseTopic); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "the tool service subscribed to "+target.RequestTopic, func() bool {
		select {
		case err := <-stopped:
			t.Fatalf("tool service stopped: %v", err)
		default:
		}
		return brokertest.Subscribed(br, target.RequestTopic)
	})
	publish := func(ctx context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		call, err := b.Call(ctx, target, wire.Request{User: "alice", Config: "{}", Arguments: string(c.Args)}, bridge.CallOptions{})
		if err != nil {
			return toolcall.Result{}, err
		}
		defer call.Close()
		out, err := call.Wait(ctx)
		return toolcall.Result{Output: out}, err
	}
	return toolcall.Chain(publish, mw), saw
}

// propagationBrokers are the brokers the propagation tests run on: the
// in-memory one, and the real Pulsar broker when the run provides one
// (TOOLGATE_PULSAR_URL).
func propagationBrokers(t *testing.T) map[string]func(t *testing.T) transport.Broker {
	bs := map[string]func(t *testing.T) transport.Broker{
		"mem": func(t *testing.T) transport.Broker {
			m := transport.NewMem()
			t.Cleanup(m.Close)
			return m
		},
	}
	if brokertest.WantPulsar() {
		bs["pulsar"] = func(t *testing.T) transport.Broker {
			brokertest.RequirePulsar(t)
			p, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			return p
		}
	}
	return bs
}

// Through the bridge and the Go SDK: with spans on, the tool service's
// span is a child of the publish span, itself a child of the call's server
// span in the caller's trace.
func TestTraceReachesTheToolServiceThroughTheBridge(t *testing.T) {
	t.Parallel()
	for name, newBroker := range propagationBrokers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tp, exp := inMemoryTracing(t)
			h, saw := bridgeChain(t, newBroker(t), tp, SpanMiddleware(tp))
			res, _, err := serve(t.Context(), h, invokeCall("echo", header("Traceparent", callerTraceparent)))
			if err != nil || res.Output != "done" {
				t.Fatalf("call: %q, %v", res.Output, err)
			}
			got := <-saw
			spans := endedSpans(t, exp, trace.SpanKindServer, trace.SpanKindProducer, trace.SpanKindConsumer)
			server := spanOfKind(t, spans, trace.SpanKindServer)
			publish := spanOfKind(t, spans, trace.SpanKindProducer)
			process := spanOfKind(t, spans, trace.SpanKindConsumer)
			if server.SpanContext.TraceID().String() != callerTraceID || server.Parent.SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("server span in trace %s under %s, want the caller's", server.SpanContext.TraceID(), server.Parent.SpanID())
			}
			if publish.Parent.SpanID() != server.SpanContext.SpanID() || publish.SpanContext.TraceID() != server.SpanContext.TraceID() {
				t.Errorf("publish span's parent %s, want the server span %s", publish.Parent.SpanID(), server.SpanContext.SpanID())
			}
			if got.traceparent == "" {
				t.Fatal("no traceparent in the request message")
			}
			if process.Parent.SpanID() != publish.SpanContext.SpanID() || !process.Parent.IsRemote() ||
				process.SpanContext.TraceID().String() != callerTraceID || got.span.SpanID() != process.SpanContext.SpanID() {
				t.Errorf("service span %v under %v, want a child of the remote publish span %s in trace %s",
					process.SpanContext.SpanID(), process.Parent, publish.SpanContext.SpanID(), callerTraceID)
			}
		})
	}
}

// Through the bridge and the Go SDK with tracing off: the caller's trace
// context still reaches the tool service (its span the remote parent of
// the service's), and a call without one carries none.
func TestCallersTraceReachesTheToolServiceWithTracingOff(t *testing.T) {
	t.Parallel()
	for name, newBroker := range propagationBrokers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, saw := bridgeChain(t, newBroker(t), nil, TraceContextMiddleware())
			if _, _, err := serve(t.Context(), h, invokeCall("echo", header("Traceparent", callerTraceparent))); err != nil {
				t.Fatal(err)
			}
			got := <-saw
			if got.span.TraceID().String() != callerTraceID || got.span.SpanID().String() != "00f067aa0ba902b7" || !got.span.IsRemote() {
				t.Errorf("the service's context carries %v, want the caller's remote span", got.span)
			}
			if got.traceparent != callerTraceparent {
				t.Errorf("traceparent property %q, want the caller's %q", got.traceparent, callerTraceparent)
			}

			if _, _, err := serve(t.Context(), h, invokeCall("echo", nil)); err != nil {
				t.Fatal(err)
			}
			got = <-saw
			if got.span.IsValid() || got.traceparent != "" {
				t.Errorf("a call without a trace context: the service saw %v, traceparent %q", got.span, got.traceparent)
			}
		})
	}
}

// endedSpans waits until exp holds a span of each kind (the bridge may
// end the publish span when the broker acknowledges the request, after
// the reply came) and returns them all.
func endedSpans(t *testing.T, exp *tracetest.InMemoryExporter, kinds ...trace.SpanKind) tracetest.SpanStubs {
	t.Helper()
	var spans tracetest.SpanStubs
	eventually.Succeeds(t, 10*time.Second, fmt.Sprintf("spans of kinds %v ended", kinds), func() error {
		spans = exp.GetSpans()
		for _, k := range kinds {
			if !slices.ContainsFunc(spans, func(s tracetest.SpanStub) bool { return s.SpanKind == k }) {
				return fmt.Errorf("none of kind %v among the %d ended", k, len(spans))
			}
		}
		return nil
	})
	return spans
}
