package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/argsjson"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// marshaler is grpc-gateway's JSON marshaler with a request decoder that
// explains what is wrong with a body in words a caller understands, and
// accepts Go-style durations ("200ms", "1m30s") for "timeout" as gRPC
// clients do.
type marshaler struct {
	runtime.JSONPb
}

func newMarshaler() *marshaler {
	return &marshaler{JSONPb: runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true},
		UnmarshalOptions: protojson.UnmarshalOptions{},
	}}
}

// NewDecoder reads the whole body (MaxBody bounds it) and decodes it with
// decodeRequest.
func (m *marshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(data)) == 0 {
			return io.EOF // grpc-gateway treats an empty body as an empty request
		}
		msg, ok := v.(proto.Message)
		if !ok {
			return m.Unmarshal(data, v)
		}
		return decodeRequest(data, msg)
	})
}

// decodeInvoke reads an InvokeTool body into req. The common body —
// {"arguments": {...}} with an optional "timeout" — takes the fast path:
// its arguments go on as JSON text in the returned context
// (argsjson.NewContext), never built into a google.protobuf.Struct.
// Anything else is decoded by decodeRequest, with its errors.
func decodeInvoke(ctx context.Context, body io.Reader, req *toolgatev1.InvokeToolRequest) (context.Context, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return ctx, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return ctx, nil // an empty body is an empty request
	}
	if args, timeout, ok := invokeFastPath(data); ok {
		req.Timeout = timeout
		return argsjson.NewContext(ctx, args), nil
	}
	return ctx, decodeRequest(data, req)
}

// invokeFastPath splits a body of only "arguments" (an object), "timeout"
// (a duration) and "name" (the path names the tool) into the compact
// arguments and the timeout. ok is false for any other body.
func invokeFastPath(data []byte) (args []byte, timeout *durationpb.Duration, ok bool) {
	body, ok := argsjson.Compact(data)
	if !ok {
		return nil, nil, false
	}
	var buf [4]argsjson.Member
	members, ok := argsjson.Members(body, buf[:0])
	if !ok {
		return nil, nil, false
	}
	args = []byte("{}")
	for _, m := range members {
		switch string(m.Key) {
		case "arguments":
			if m.Value[0] != '{' {
				return nil, nil, false
			}
			args = m.Value
		case "timeout":
			s := m.Value
			if s[0] != '"' || bytes.IndexByte(s, '\\') >= 0 {
				return nil, nil, false
			}
			d, err := parseDuration(string(s[1 : len(s)-1]))
			if err != nil {
				return nil, nil, false
			}
			timeout = durationpb.New(d)
		case "name":
			if m.Value[0] != '"' {
				return nil, nil, false
			}
		default:
			return nil, nil, false
		}
	}
	return args, timeout, true
}

// decodeRequest decodes a request body into msg. The common case costs one
// protojson pass; only a body protojson refuses is looked at again, to say
// what is wrong or to rewrite a Go-style duration.
func decodeRequest(data []byte, msg proto.Message) error {
	err := protojson.Unmarshal(data, msg)
	if err == nil {
		return nil
	}
	fixed, derr := diagnose(data, msg.ProtoReflect().Descriptor())
	if derr != nil {
		return derr
	}
	if fixed != nil {
		proto.Reset(msg)
		if err2 := protojson.Unmarshal(fixed, msg); err2 == nil {
			return nil
		}
	}
	return fmt.Errorf("invalid request body: %s", strings.TrimPrefix(err.Error(), "proto: "))
}

// timeoutHint is what a caller is told about "timeout".
const timeoutHint = `"timeout" must be a duration such as "5s", "0.2s" or "200ms"`

// diagnose looks at a body protojson refused. It returns a clear error, or
// a rewritten body (durations in protobuf's form) to try again, or neither.
func diagnose(data []byte, md protoreflect.MessageDescriptor) ([]byte, error) {
	var top any
	if err := json.Unmarshal(data, &top); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("the request body is not valid JSON: %s (at byte %d)", se.Error(), se.Offset)
		}
		return nil, fmt.Errorf("the request body is not valid JSON: %w", err)
	}
	obj, ok := top.(map[string]any)
	if !ok {
		return nil, errors.New(`the request body must be a JSON object, such as {"arguments": {...}}`)
	}
	fields := md.Fields()
	var names []string
	for i := 0; i < fields.Len(); i++ {
		if f := fields.Get(i); f.Name() != "name" {
			names = append(names, string(f.Name()))
		}
	}
	sort.Strings(names)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	changed := false
	for _, k := range keys {
		f := fields.ByName(protoreflect.Name(k))
		if f == nil {
			f = fields.ByJSONName(k)
		}
		if f == nil {
			return nil, fmt.Errorf("unknown field %q in the request body; it may hold %s", k, strings.Join(quoteAll(names), ", "))
		}
		v := obj[k]
		if v == nil {
			continue
		}
		if f.Kind() != protoreflect.MessageKind {
			continue
		}
		switch f.Message().FullName() {
		case "google.protobuf.Struct":
			if _, ok := v.(map[string]any); !ok {
				return nil, fmt.Errorf(`%q must be a JSON object, such as {"topic": "cats"}, not %s`, k, jsonKind(v))
			}
		case "google.protobuf.Duration":
			s, ok := v.(string)
			if !ok {
				return nil, errors.New(timeoutHint + ", as a JSON string")
			}
			d, err := parseDuration(s)
			if err != nil {
				return nil, fmt.Errorf("%s; %q is not one", timeoutHint, s)
			}
			obj[k] = strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
			changed = true
		}
	}
	if !changed {
		return nil, nil
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, nil
	}
	return out, nil
}

// parseDuration accepts Go durations ("200ms", "1m30s") and protobuf's
// seconds form ("0.2s"), both non-negative.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, errors.New("negative")
	}
	return d, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	default:
		return "something else"
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}
