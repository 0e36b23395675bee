// Package apiproto writes what the core answers as the toolgate.v1 API's
// protobuf messages, which the gRPC door sends and the REST door writes as
// JSON: tools, tool services, and a tool's output as a JSON value.
package apiproto

import (
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/registry"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Tool describes t as read from the snapshot of the given version.
func Tool(t *registry.Tool, version int64) *toolgatev1.Tool {
	out := &toolgatev1.Tool{Name: t.Name, Description: t.Description, Service: t.Service.ID, Strict: t.Strict,
		Source: string(t.Origin), RegistryVersion: version}
	for _, a := range t.Arguments {
		out.Arguments = append(out.Arguments, &toolgatev1.ToolArgument{Name: a.Name, Type: a.Type, Description: a.Description, Required: a.Required})
	}
	if s, err := structpb.NewStruct(t.Schema); err == nil {
		out.ArgumentsSchema = s
	}
	return out
}

// Tools describes a page of tools.
func Tools(ts []*registry.Tool, version int64, next string) *toolgatev1.ListToolsResponse {
	out := &toolgatev1.ListToolsResponse{NextPageToken: next, Tools: make([]*toolgatev1.Tool, 0, len(ts))}
	for _, t := range ts {
		out.Tools = append(out.Tools, Tool(t, version))
	}
	return out
}

// Service describes a tool service.
func Service(s *registry.Service) *toolgatev1.ToolServiceDescriptor {
	out := &toolgatev1.ToolServiceDescriptor{Id: s.ID, RequestTopic: s.RequestTopic, ResponseTopic: s.ResponseTopic}
	for _, p := range s.Params {
		out.ConfigParams = append(out.ConfigParams, &toolgatev1.ConfigParam{Name: p.Name, Required: p.Required})
	}
	if s.Timeout > 0 {
		out.DefaultTimeout = durationpb.New(s.Timeout)
	}
	return out
}

// Services describes a page of tool services.
func Services(ss []*registry.Service, next string) *toolgatev1.ListToolServicesResponse {
	out := &toolgatev1.ListToolServicesResponse{NextPageToken: next, ToolServices: make([]*toolgatev1.ToolServiceDescriptor, 0, len(ss))}
	for _, s := range ss {
		out.ToolServices = append(out.ToolServices, Service(s))
	}
	return out
}

// IsJSON reports whether text may be a JSON value by its first
// non-space byte: a cheap test that keeps plain prose off the parser.
func IsJSON(text string) bool {
	i := 0
	for i < len(text) && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r') {
		i++
	}
	if i == len(text) {
		return false
	}
	switch c := text[i]; {
	case c == '{', c == '[', c == '"', c == '-', c >= '0' && c <= '9', c == 't', c == 'f', c == 'n':
		return true
	}
	return false
}

// JSONValue returns text as a JSON value when it is valid JSON, else nil.
func JSONValue(text string) *structpb.Value {
	if !IsJSON(text) {
		return nil
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal([]byte(text), v); err != nil {
		return nil
	}
	return v
}
