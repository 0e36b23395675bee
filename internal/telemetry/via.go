package telemetry

import (
	"context"
	"strings"
	"sync"
)

// viaMCPKey marks the context of a call that came in through the MCP
// endpoint.
type viaMCPKey struct{}

// ViaMCP marks ctx as the context of a call made through the MCP endpoint:
// the metrics and the call log then name its method "mcp/<Method>"
// (mcp/InvokeTool, mcp/ListTools, …) instead of the gRPC full method name.
func ViaMCP(ctx context.Context) context.Context {
	return context.WithValue(ctx, viaMCPKey{}, true)
}

// mcpMethods caches "mcp/<Method>" per gRPC full method name, so that a
// marked call does not build the label again.
var mcpMethods sync.Map // string → string

// methodLabel is the method a call is counted and logged under: its gRPC
// full method name, or "mcp/<Method>" for calls ViaMCP marked. Unmarked
// calls pay one context lookup.
func methodLabel(ctx context.Context, full string) string {
	if ctx.Value(viaMCPKey{}) == nil {
		return full
	}
	if v, ok := mcpMethods.Load(full); ok {
		return v.(string)
	}
	label := "mcp/" + full[strings.LastIndexByte(full, '/')+1:]
	mcpMethods.Store(full, label)
	return label
}
