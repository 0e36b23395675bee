// Package apiproto converts between the core's calls and the toolgate.v1
// API's protobuf messages, for the doors that speak them (gRPC and Connect
// send them, REST writes them as JSON): a request's arguments and timeout
// into a Call, and tools, tool services and a tool's output as a JSON
// value out of a Result.
package apiproto

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// Request puts a request's arguments (written as JSON object text) and
// timeout into c. argsJSON, when set, is the arguments as the caller wrote
// them, passed on as is (the core checks them); setting it and args both
// is refused. A malformed timeout or arguments that cannot be written as
// JSON are INVALID_ARGUMENT.
func Request(c *toolcall.Call, args *structpb.Struct, argsJSON string, timeout *durationpb.Duration) error {
	if timeout != nil {
		c.TimeoutSet = true
		if err := timeout.CheckValid(); err != nil {
			return toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonInvalidTimeout, "timeout must be a positive duration such as \"5s\"", nil)
		}
		c.Timeout = timeout.AsDuration()
	}
	if argsJSON != "" {
		if len(args.GetFields()) > 0 {
			return toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonArgumentsConflict, "set arguments or arguments_json, not both", nil)
		}
		c.Args = []byte(argsJSON)
		return nil
	}
	b, err := Arguments(args)
	if err != nil {
		return err
	}
	c.Args = b
	return nil
}

// maxDepth bounds the nesting of argument values, as every JSON decoder
// of the gateway does.
const maxDepth = jsontext.MaxDepth

// Arguments writes a request's arguments as the JSON object text a Call
// carries, keys sorted; nil is an empty object. Numbers are what the
// google.protobuf.Struct holds: doubles, integers written without a
// fraction.
func Arguments(args *structpb.Struct) ([]byte, error) {
	fields := args.GetFields()
	if len(fields) == 0 {
		return []byte("{}"), nil
	}
	b, err := appendStruct(make([]byte, 0, 64), fields, 0)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "arguments: %v", err)
	}
	return b, nil
}

// appendStruct writes fields as a JSON object with sorted keys.
func appendStruct(b []byte, fields map[string]*structpb.Value, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("arguments nest deeper than %d levels", maxDepth)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, '{')
	var err error
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = wire.AppendJSONString(b, k)
		b = append(b, ':')
		if b, err = appendValue(b, fields[k], depth+1); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

func appendValue(b []byte, v *structpb.Value, depth int) ([]byte, error) {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return wire.AppendJSONString(b, x.StringValue), nil
	case *structpb.Value_NumberValue:
		f := x.NumberValue
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("numbers must be finite")
		}
		if f == math.Trunc(f) && math.Abs(f) < 1e15 {
			return strconv.AppendInt(b, int64(f), 10), nil
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64), nil
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(b, x.BoolValue), nil
	case *structpb.Value_StructValue:
		return appendStruct(b, x.StructValue.GetFields(), depth)
	case *structpb.Value_ListValue:
		if depth > maxDepth {
			return nil, fmt.Errorf("arguments nest deeper than %d levels", maxDepth)
		}
		b = append(b, '[')
		var err error
		for i, e := range x.ListValue.GetValues() {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendValue(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	default:
		return append(b, "null"...), nil
	}
}
