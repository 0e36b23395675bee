package apiproto

import (
	"testing"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Request: arguments_json is passed on as written; a Struct is written as
// JSON text; both at once are refused.
func TestRequestArguments(t *testing.T) {
	t.Parallel()
	exact := `{"big":123456789012345678,"z":-0.0,"f":1.10}`
	s, err := structpb.NewStruct(map[string]any{"b": true, "a": 1.5})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     *structpb.Struct
		argsJSON string
		want     string
		code     codes.Code
	}{
		{"as written", nil, exact, exact, codes.OK},
		{"empty struct beside text", &structpb.Struct{}, exact, exact, codes.OK},
		{"struct", s, "", `{"a":1.5,"b":true}`, codes.OK},
		{"none", nil, "", `{}`, codes.OK},
		{"both", s, exact, "", codes.InvalidArgument},
	}
	for _, tc := range tests {
		var c toolcall.Call
		err := Request(&c, tc.args, tc.argsJSON, nil)
		if got := status.Code(err); got != tc.code {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.code)
		}
		if err == nil && string(c.Args) != tc.want {
			t.Fatalf("%s: arguments %s, want %s", tc.name, c.Args, tc.want)
		}
	}
}
