package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/openapi31"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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

// callBody reads the common body of an invoke or stream call —
// {"arguments": {...}, "timeout": "5s"}, with "name" allowed and ignored
// (the path names the tool) — into c, the arguments as the caller wrote
// them. ok is false for any other body, which decodeRequest then explains;
// err is set for a body that is JSON but that no decoder should read
// (repeated keys, invalid UTF-8, deep nesting).
func callBody(data []byte, c *toolcall.Call) (ok bool, err error) {
	body, err := jsontext.Compact(data)
	switch {
	case errors.Is(err, jsontext.ErrSyntax), errors.Is(err, jsontext.ErrNotObject):
		return false, nil
	case err != nil:
		return false, toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonInvalidBody, "the request body "+err.Error(), nil)
	}
	var buf [4]jsontext.Member
	members, ok := jsontext.Members(body, buf[:0])
	if !ok {
		return false, nil
	}
	var args, argsJSON bool
	var argsText []byte // arguments_json's text, when set
	for _, m := range members {
		switch string(m.Key) {
		case "arguments", "arguments_json", "timeout", "name":
		default:
			return false, nil // unknown, even when null
		}
		if string(m.Value) == "null" {
			continue // not set
		}
		switch string(m.Key) {
		case "arguments":
			if m.Value[0] != '{' {
				return false, nil
			}
			// A member of the compacted body: checked and compact already.
			// An empty object beside arguments_json is no conflict: a
			// client that always writes arguments, as gRPC's and
			// Connect's treat an empty Struct.
			c.Args, c.ArgsCompact = m.Value, true
			args = string(m.Value) != "{}"
		case "arguments_json":
			// The arguments as JSON object text inside a string, as
			// gRPC clients send them to keep numbers exact.
			var text string
			if m.Value[0] != '"' || json.Unmarshal(m.Value, &text) != nil {
				return false, nil
			}
			if text != "" {
				argsText, argsJSON = []byte(text), true
			}
		case "timeout":
			s := m.Value
			if s[0] != '"' || bytes.IndexByte(s, '\\') >= 0 {
				return false, nil
			}
			d, err := parseDuration(string(s[1 : len(s)-1]))
			if err != nil {
				return false, toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonInvalidTimeout, fmt.Sprintf("%s; %s is not one", timeoutHint, s), nil)
			}
			c.Timeout, c.TimeoutSet = d, true
		case "name":
			if m.Value[0] != '"' {
				return false, nil
			}
		}
	}
	if args && argsJSON {
		return false, toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonArgumentsConflict, "set arguments or arguments_json, not both", nil)
	}
	if argsJSON {
		c.Args, c.ArgsCompact = argsText, false
	}
	return true, nil
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
		if f.Kind() == protoreflect.StringKind {
			if _, ok := v.(string); !ok {
				return nil, fmt.Errorf(`%q must be a JSON string, not %s`, k, jsonKind(v))
			}
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

// durationRE is what a "timeout" may be: the pattern the OpenAPI
// document gives it.
var durationRE = regexp.MustCompile(openapi31.DurationPattern)

// parseDuration accepts what the OpenAPI document says a timeout is: Go
// durations ("200ms", "1m30s") and protobuf's seconds form ("0.2s"), of a
// nanosecond or more. A duration longer than time.Duration holds is the
// longest one (the core caps it at its MaxTimeout).
func parseDuration(s string) (time.Duration, error) {
	if !durationRE.MatchString(s) {
		return 0, errors.New("not a duration")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return math.MaxInt64, nil // the pattern admits only overflow here
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
