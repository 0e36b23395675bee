package server

import (
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/registry"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// toolProto describes t as read from the snapshot of the given version.
func toolProto(t *registry.Tool, version int64) *toolgatev1.Tool {
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

func serviceProto(s *registry.Service) *toolgatev1.ToolServiceDescriptor {
	out := &toolgatev1.ToolServiceDescriptor{Id: s.ID, RequestTopic: s.RequestTopic, ResponseTopic: s.ResponseTopic}
	for _, p := range s.Params {
		out.ConfigParams = append(out.ConfigParams, &toolgatev1.ConfigParam{Name: p.Name, Required: p.Required})
	}
	if s.Timeout > 0 {
		out.DefaultTimeout = durationpb.New(s.Timeout)
	}
	return out
}

// parseJSONValue returns text as a JSON value when it is valid JSON, else
// nil. A cheap first-byte test keeps plain prose off the JSON parser; the
// parser itself rejects what is not valid JSON.
func parseJSONValue(text string) *structpb.Value {
	i := 0
	for i < len(text) && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r') {
		i++
	}
	if i == len(text) {
		return nil
	}
	switch c := text[i]; {
	case c == '{', c == '[', c == '"', c == '-', c >= '0' && c <= '9', c == 't', c == 'f', c == 'n':
	default:
		return nil
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal([]byte(text), v); err != nil {
		return nil
	}
	return v
}
