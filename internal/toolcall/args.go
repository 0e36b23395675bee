package toolcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/registry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// checkArguments checks a call's arguments, JSON object text, against the
// tool's declared arguments or its input schema and returns the text the
// envelope carries: the same, compacted. A wrong type, a missing required
// argument, (for strict tools) an undeclared one, or any keyword of the
// input schema that fails is an INVALID_ARGUMENT naming the argument (and
// the keyword); so is text that is not a JSON object.
//
// compacted says raw is jsontext.Compact's output already (Call.ArgsCompact),
// which is then not read a second time. The errors name the tool as name,
// the caller's name for it (Call.ShownName).
func checkArguments(t *registry.Tool, name string, raw []byte, compacted bool) (string, error) {
	compact := raw
	if !compacted || len(raw) < 2 || raw[0] != '{' {
		if t := bytes.Trim(raw, " \t\r\n"); len(t) == 0 || string(t) == "null" {
			raw = []byte("{}")
		}
		var err error
		if compact, err = jsontext.Compact(raw); err != nil {
			// The text of the arguments "is not valid JSON", "must be a
			// JSON object", …: jsontext's errors read after a singular
			// subject.
			return "", invalidArguments(name, fmt.Sprintf("tool %q: the text of the arguments %v", name, err))
		}
	}
	if len(t.Arguments) > 0 || t.Strict {
		if err := checkDeclared(t, name, compact); err != nil {
			return "", err
		}
	}
	if t.InputSchema != nil {
		if err := t.InputSchema.Check(compact); err != nil {
			var ae *registry.ArgumentError
			if errors.As(err, &ae) {
				return "", invalidArguments(name, fmt.Sprintf("tool %q: %v", name, ae))
			}
			return "", status.Errorf(codes.Internal, "tool %q: the arguments could not be checked against the input schema", name)
		}
	}
	return string(compact), nil
}

// invalidArguments is the INVALID_ARGUMENT of arguments the tool the
// caller calls name refuses.
func invalidArguments(name, msg string) error {
	return gatewayError(codes.InvalidArgument, ReasonInvalidArguments, msg, map[string]string{"tool": name})
}

// checkDeclared checks compact arguments against the tool's declared
// ones. It is a function of its own, not inlined, so that its member
// buffer does not weigh on the stack of every call (see jsontext).
//
//go:noinline
func checkDeclared(t *registry.Tool, name string, compact []byte) error {
	var buf [8]jsontext.Member
	members, ok := jsontext.Members(compact, buf[:0])
	if !ok {
		return status.Errorf(codes.Internal, "tool %q: the arguments could not be read back", name)
	}
	for _, a := range t.Arguments {
		var v *jsontext.Member
		for i := range members {
			if keyIs(members[i].Key, a.Name) {
				v = &members[i]
				break
			}
		}
		if v == nil {
			if a.Required {
				return invalidArguments(name, fmt.Sprintf("tool %q: missing required argument %q", name, a.Name))
			}
			continue
		}
		if kind := v.Kind(); kind != a.Type && (a.Type != "integer" || !v.IsInteger()) {
			return invalidArguments(name, fmt.Sprintf("tool %q: argument %q must be of type %s, got %s", name, a.Name, a.Type, kind))
		}
	}
	if t.Strict {
		for _, m := range members {
			if !declared(t, m.Key) {
				return invalidArguments(name, fmt.Sprintf("tool %q: unknown argument %q (the tool accepts only its declared arguments)", name, unescape(m.Key)))
			}
		}
	}
	return nil
}

// keyIs reports whether an object key, as written, names name.
func keyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key) == name
	}
	return unescape(key) == name
}

func unescape(key []byte) string {
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key)
	}
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &s) != nil {
		return string(key)
	}
	return s
}

func declared(t *registry.Tool, key []byte) bool {
	for _, a := range t.Arguments {
		if keyIs(key, a.Name) {
			return true
		}
	}
	return false
}
