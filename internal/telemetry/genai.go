package telemetry

import (
	"context"
	"strings"

	"github.com/toolgate/toolgate/internal/toolcall"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	genai "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// GenAISemconvVersion is the version of OpenTelemetry's semantic
// conventions the GenAI tool execution and MCP attributes of spans and
// metrics follow: 1.41.0, the newest whose Go package
// (go.opentelemetry.io/otel/semconv/v1.41.0) still generates the gen_ai.*
// and mcp.* attributes (they are in development).
const GenAISemconvVersion = "1.41.0"

// GenAISchemaURL is the schema of GenAISemconvVersion.
const GenAISchemaURL = genai.SchemaURL

// BaggageToolName is the W3C baggage member that carries the called tool's
// name to the tool service, next to traceparent (a TrustGraph envelope
// does not name the tool): the Go SDK names its execute_tool span by it.
const BaggageToolName = "gen_ai.tool.name"

// genAIToolType is the gen_ai.tool.type of every tool the gateway calls:
// executed by the agent's side (here, a tool service), not by the model's
// client ("function") nor a data store.
const genAIToolType = "extension"

// runsTool reports whether the call executes a tool.
func runsTool(op toolcall.Op) bool {
	return op == toolcall.OpInvoke || op == toolcall.OpStream || op == toolcall.OpStartTool
}

// mcpMethod is the MCP method of a call that came by the MCP door (its
// method "mcp/…"), and whether it did.
func mcpMethod(c *toolcall.Call) (attribute.KeyValue, bool) {
	if !strings.HasPrefix(c.MethodName(), "mcp/") {
		return attribute.KeyValue{}, false
	}
	switch c.Op {
	case toolcall.OpInvoke, toolcall.OpStream, toolcall.OpStartTool:
		return genai.McpMethodNameToolsCall, true
	case toolcall.OpListTools:
		return genai.McpMethodNameToolsList, true
	case toolcall.OpGetOperation, toolcall.OpWaitOperation:
		return genai.McpMethodNameKey.String("tasks/get"), true
	case toolcall.OpListOperations:
		return genai.McpMethodNameKey.String("tasks/list"), true
	case toolcall.OpCancelOperation, toolcall.OpDeleteOperation:
		return genai.McpMethodNameKey.String("tasks/cancel"), true
	}
	return genai.McpMethodNameKey.String(strings.TrimPrefix(c.MethodName(), "mcp/")), true
}

// semconvSpan is a call's span name and its GenAI and MCP attributes,
// as the conventions of GenAISemconvVersion have them: an MCP request is
// "{mcp.method.name} {tool}" with mcp.method.name (and
// mcp.protocol.version when the client sent it); a call that runs a tool
// has gen_ai.operation.name execute_tool, gen_ai.tool.name and
// gen_ai.tool.type, and, off MCP, is named "execute_tool {tool}". Other
// calls keep the RPC name.
func semconvSpan(c *toolcall.Call, rpcName string) (string, []attribute.KeyValue) {
	var attrs []attribute.KeyValue
	name := rpcName
	method, isMCP := mcpMethod(c)
	if isMCP {
		attrs = append(attrs, method)
		if v := c.Header.Values("mcp-protocol-version"); len(v) > 0 {
			attrs = append(attrs, genai.McpProtocolVersion(v[0]))
		}
		name = method.Value.AsString()
	}
	if runsTool(c.Op) {
		attrs = append(attrs, genai.GenAIOperationNameExecuteTool, genai.GenAIToolName(c.Name), genai.GenAIToolTypeKey.String(genAIToolType))
		if isMCP {
			name += " " + c.Name
		} else {
			name = "execute_tool " + c.Name
		}
	}
	return name, attrs
}

// callKey holds the call a context serves, for the publish hook.
type callKey struct{}

// withCall notes c in ctx.
func withCall(ctx context.Context, c *toolcall.Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// injectToolBaggage writes the tool of ctx's call into props as W3C
// baggage (BaggageToolName).
func injectToolBaggage(ctx context.Context, props map[string]string) {
	c, ok := ctx.Value(callKey{}).(*toolcall.Call)
	if !ok || !runsTool(c.Op) || c.Name == "" {
		return
	}
	m, err := baggage.NewMemberRaw(BaggageToolName, c.Name)
	if err != nil {
		return
	}
	b, err := baggage.New(m)
	if err != nil {
		return
	}
	propagation.Baggage{}.Inject(baggage.ContextWithBaggage(ctx, b), propagation.MapCarrier(props))
}

func genAIToolName(name string) attribute.KeyValue { return genai.GenAIToolName(name) }
