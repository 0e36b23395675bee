package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/toolgate/toolgate/internal/toolcall"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
)

// ScopeName names the tracer of the spans this package starts.
const ScopeName = "github.com/toolgate/toolgate/internal/telemetry"

// TracingConfig configures SetupTracing. Its zero value turns tracing off.
type TracingConfig struct {
	// OTLPEndpoint is the OTLP/gRPC collector's host:port
	// ("127.0.0.1:4317"), or a URL ("http://127.0.0.1:4317"; http means
	// no TLS). Empty: no exporter, tracing is off.
	OTLPEndpoint string
	// OTLPInsecure sends to a host:port endpoint without TLS.
	OTLPInsecure bool
	// ServiceName is the resource's service.name (default "toolgate");
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it.
	ServiceName string
	// ServiceVersion is the resource's service.version, when set.
	ServiceVersion string
	// SampleRatio is the share of new traces recorded, in (0, 1]
	// (default 1). Calls that arrive in a trace follow its sampling flag.
	SampleRatio float64
	// Exporter, when set, receives the spans instead of an OTLP exporter
	// (tests, or stdouttrace), and turns tracing on.
	Exporter sdktrace.SpanExporter
	// Logger receives OpenTelemetry's own errors, such as failed exports
	// (default: discard).
	Logger *slog.Logger
}

// SetupTracing installs the process's tracer provider and the W3C
// TraceContext propagator as OpenTelemetry's globals. Off (no endpoint,
// no exporter), spans are not recorded, but a trace context that arrives
// with a call is still passed on to the tool service. shutdown flushes the
// spans not yet exported and stops the exporter; it is never nil.
func SetupTracing(ctx context.Context, cfg TracingConfig) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", "err", err)
	}))
	noop := func(context.Context) error { return nil }
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return noop, fmt.Errorf("telemetry: sample ratio %v: want a number in (0, 1]", cfg.SampleRatio)
	}
	exp := cfg.Exporter
	if exp == nil && cfg.OTLPEndpoint == "" {
		return noop, nil
	}
	if exp == nil {
		if exp, err = newOTLPExporter(ctx, cfg); err != nil {
			return noop, err
		}
	}
	name := cfg.ServiceName
	if name == "" {
		name = "toolgate"
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name)}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.ServiceVersion))
	}
	// Later detectors win: the environment may rename the service.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		if res == nil {
			_ = exp.Shutdown(ctx)
			return noop, fmt.Errorf("telemetry: resource: %w", err)
		}
		log.Warn("tracing resource is incomplete", "err", err)
	}
	ratio := cfg.SampleRatio
	if ratio == 0 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

func newOTLPExporter(ctx context.Context, cfg TracingConfig) (sdktrace.SpanExporter, error) {
	var opts []otlptracegrpc.Option
	if strings.Contains(cfg.OTLPEndpoint, "://") {
		opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.OTLPEndpoint))
	} else {
		opts = append(opts, otlptracegrpc.WithEndpoint(cfg.OTLPEndpoint))
		if cfg.OTLPInsecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter for %q: %w", cfg.OTLPEndpoint, err)
	}
	return exp, nil
}

// InjectTraceparent writes the trace context of ctx's span into a request
// message's properties as traceparent (and tracestate when there is one),
// so the tool service's spans join the trace, and the called tool's name as
// W3C baggage (BaggageToolName). Without a valid span context
// it writes nothing; props must not be nil.
func InjectTraceparent(ctx context.Context, props map[string]string) {
	if props == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(props))
	injectToolBaggage(ctx, props)
}

// TracePublish is the bridge's publish hook: it starts a producer span
// for the request (StartPublishSpan) and writes its trace context into
// the message's properties (InjectTraceparent), so the tool service's
// spans join the caller's trace. Call end with the publish's error.
func TracePublish(ctx context.Context, topic string, props map[string]string) (_ context.Context, end func(error)) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, noEnd // no trace to carry on: the commonest call, one look at ctx
	}
	ctx, end = StartPublishSpan(ctx, topic)
	InjectTraceparent(ctx, props)
	return ctx, end
}

func noEnd(error) {}

// StartPublishSpan starts a producer span for publishing one request on a
// Pulsar topic, a child of ctx's span, from the tracer provider that made
// that span (no parent span: no span). Inject the returned context's trace
// context into the message, then call end with the publish's error.
func StartPublishSpan(ctx context.Context, topic string, attrs ...attribute.KeyValue) (context.Context, func(err error)) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return ctx, func(error) {}
	}
	tracer := parent.TracerProvider().Tracer(ScopeName)
	ctx, span := tracer.Start(ctx, "send "+topic,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemPulsar,
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("send"),
			semconv.MessagingDestinationName(topic),
		),
		trace.WithAttributes(attrs...),
	)
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(otelcodes.Error, err.Error())
		}
		span.End()
	}
}

// SpanMiddleware starts one server span per call, continuing the W3C
// trace context the caller sent (traceparent, tracestate). Every door runs
// it, so a call gets the same span whichever door it came in by. tp nil
// means OpenTelemetry's global provider.
func SpanMiddleware(tp trace.TracerProvider) toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			p := tp
			if p == nil {
				p = otel.GetTracerProvider()
			}
			rpcName := strings.TrimPrefix(c.MethodName(), "/")
			name, attrs := semconvSpan(c, rpcName)
			ctx = propagation.TraceContext{}.Extract(ctx, headerCarrier{c.Header})
			ctx, span := p.Tracer(ScopeName).Start(withCall(ctx, c), name, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(semconv.RPCSystemNameGRPC, attribute.String("rpc.method", rpcName)), trace.WithAttributes(attrs...))
			res, err := next(ctx, c, emit)
			if err != nil {
				code := status.Code(err).String()
				span.SetStatus(otelcodes.Error, err.Error())
				span.SetAttributes(attribute.String("rpc.grpc.status_code", code), semconv.ErrorTypeKey.String(code))
			}
			if runsTool(c.Op) {
				// A tool set may have shown the tool under another name:
				// the span names the registry's.
				if after, _ := semconvSpan(c, rpcName); after != name {
					span.SetName(after)
					span.SetAttributes(genAIToolName(c.Name))
				}
			}
			span.End()
			return res, err
		}
	}
}

// traceparentKey is the W3C trace context's main header.
const traceparentKey = "traceparent"

// headerCarrier reads a call's header for the propagator.
type headerCarrier struct{ h toolcall.Header }

func (c headerCarrier) Get(key string) string {
	if v := c.h.Values(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (headerCarrier) Set(string, string) {}

func (headerCarrier) Keys() []string { return nil }

// TraceContextMiddleware carries the W3C trace context a caller sent into
// the call's context, without starting spans: with tracing off it replaces
// SpanMiddleware, whose per-call span machinery costs more than everything
// else the gateway does for a call, and still lets the tool service join
// the caller's trace.
func TraceContextMiddleware() toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			if len(c.Header.Values(traceparentKey)) == 0 {
				return next(ctx, c, emit) // nothing to carry (and no carrier to allocate)
			}
			return next(propagation.TraceContext{}.Extract(ctx, headerCarrier{c.Header}), c, emit)
		}
	}
}
