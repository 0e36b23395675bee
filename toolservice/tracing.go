package toolservice

import (
	"context"

	"go.opentelemetry.io/otel/baggage"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the tracer of the spans a Service starts.
const tracerName = "github.com/toolgate/toolgate/toolservice"

// baggageToolName is the W3C baggage member in which the gateway names
// the tool a request calls (a TrustGraph envelope does not).
const baggageToolName = "gen_ai.tool.name"

// startSpan starts the span of one request when the Config has a
// TracerProvider: a consumer span in the caller's trace (ctx carries it),
// named and described by OpenTelemetry's semantic conventions 1.41.0 for
// GenAI tool execution ("execute_tool {gen_ai.tool.name}",
// gen_ai.operation.name execute_tool) and messaging (pulsar, process, the
// request topic). end records the handler's error.
func (s *Service) startSpan(ctx context.Context, props map[string]string, id string) (context.Context, func(error)) {
	tp := s.cfg.TracerProvider
	if tp == nil {
		return ctx, func(error) {}
	}
	tool := baggage.FromContext(propagation.Baggage{}.Extract(ctx, propagation.MapCarrier(props))).Member(baggageToolName).Value()
	name := "execute_tool"
	attrs := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		semconv.GenAIOperationNameExecuteTool,
		semconv.MessagingSystemPulsar,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingDestinationName(s.reqTopic),
		semconv.MessagingMessageID(id),
	)}
	if tool != "" {
		name += " " + tool
		attrs = append(attrs, trace.WithAttributes(semconv.GenAIToolName(tool)))
	}
	ctx, span := tp.Tracer(tracerName).Start(ctx, name, attrs...)
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(otelcodes.Error, err.Error())
		}
		span.End()
	}
}
