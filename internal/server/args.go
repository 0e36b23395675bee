package server

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/argsjson"
	"github.com/toolgate/toolgate/internal/registry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// maxDepth bounds the nesting of argument values.
const maxDepth = 64

// arguments checks and encodes a call's arguments: those a front door put
// in ctx as JSON text (argsjson) when the request message holds none, else
// the message's own.
func (s *Server) arguments(ctx context.Context, t *registry.Tool, args argsSource) (string, error) {
	st := args.GetArguments()
	if st == nil {
		if raw, ok := argsjson.FromContext(ctx); ok {
			return encodeArgumentsJSON(t, raw)
		}
	}
	return encodeArguments(t, st)
}

// encodeArgumentsJSON is encodeArguments for arguments that came as a
// compact JSON object (argsjson.Compact, which the front doors apply; text
// it refuses never comes this way): checked member by member and passed on
// as they are.
func encodeArgumentsJSON(t *registry.Tool, raw []byte) (string, error) {
	var buf [8]argsjson.Member
	members, ok := argsjson.Members(raw, buf[:0])
	if !ok {
		return "", status.Errorf(codes.Internal, "tool %q: the arguments passed on are not a compact JSON object", t.Name)
	}
	for _, a := range t.Arguments {
		var v *argsjson.Member
		for i := range members {
			if string(members[i].Key) == a.Name {
				v = &members[i]
				break
			}
		}
		if v == nil {
			if a.Required {
				return "", status.Errorf(codes.InvalidArgument, "tool %q: missing required argument %q", t.Name, a.Name)
			}
			continue
		}
		// Numbers on the fast path are integers (argsjson.Compact), so
		// they are both "number" and "integer".
		if kind := v.Kind(); kind != a.Type && (kind != "number" || a.Type != "integer") {
			return "", status.Errorf(codes.InvalidArgument, "tool %q: argument %q must be of type %s, got %s", t.Name, a.Name, a.Type, kind)
		}
	}
	if t.Strict {
		for _, m := range members {
			if !declared(t, string(m.Key)) {
				return "", status.Errorf(codes.InvalidArgument, "tool %q: unknown argument %q (the tool accepts only its declared arguments)", t.Name, m.Key)
			}
		}
	}
	return string(raw), nil
}

// encodeArguments checks a call's arguments against the tool's declared
// arguments and encodes them as the JSON object string the envelope carries.
// A wrong type, a missing required argument, or (for strict tools) an
// undeclared one is an INVALID_ARGUMENT naming the argument.
func encodeArguments(t *registry.Tool, args *structpb.Struct) (string, error) {
	fields := args.GetFields()
	for _, a := range t.Arguments {
		v, ok := fields[a.Name]
		if !ok || v == nil {
			if a.Required {
				return "", status.Errorf(codes.InvalidArgument, "tool %q: missing required argument %q", t.Name, a.Name)
			}
			continue
		}
		if !hasType(v, a.Type) {
			return "", status.Errorf(codes.InvalidArgument, "tool %q: argument %q must be of type %s, got %s", t.Name, a.Name, a.Type, typeOf(v))
		}
	}
	if t.Strict {
		for name := range fields {
			if !declared(t, name) {
				return "", status.Errorf(codes.InvalidArgument, "tool %q: unknown argument %q (the tool accepts only its declared arguments)", t.Name, name)
			}
		}
	}
	if len(fields) == 0 {
		return "{}", nil
	}
	b, err := appendStruct(make([]byte, 0, 64), fields, 0)
	if err != nil {
		return "", status.Errorf(codes.InvalidArgument, "tool %q: %v", t.Name, err)
	}
	return string(b), nil
}

func declared(t *registry.Tool, name string) bool {
	for _, a := range t.Arguments {
		if a.Name == name {
			return true
		}
	}
	return false
}

func hasType(v *structpb.Value, typ string) bool {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return typ == "string"
	case *structpb.Value_NumberValue:
		return typ == "number" || (typ == "integer" && x.NumberValue == math.Trunc(x.NumberValue))
	case *structpb.Value_BoolValue:
		return typ == "boolean"
	case *structpb.Value_StructValue:
		return typ == "object"
	case *structpb.Value_ListValue:
		return typ == "array"
	}
	return false // null matches no declared type
}

func typeOf(v *structpb.Value) string {
	switch v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return "string"
	case *structpb.Value_NumberValue:
		return "number"
	case *structpb.Value_BoolValue:
		return "boolean"
	case *structpb.Value_StructValue:
		return "object"
	case *structpb.Value_ListValue:
		return "array"
	default:
		return "null"
	}
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
		b = appendString(b, k)
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
		return appendString(b, x.StringValue), nil
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

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string. Invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
