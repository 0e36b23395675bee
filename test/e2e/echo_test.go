package e2e

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

func invokeEcho(t *testing.T, args map[string]any) (*toolgatev1.InvokeToolResponse, error) {
	t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	return env.grpc.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: s})
}

func TestOutputJSON(t *testing.T) {
	t.Parallel()
	args := map[string]any{"a": 1.0, "b": []any{"x", true}, "c": map[string]any{"d": "é"}}
	resp, err := invokeEcho(t, args)
	if err != nil {
		t.Fatal(err)
	}
	got := resp.GetOutputJson().GetStructValue().AsMap()
	if !reflect.DeepEqual(got, args) {
		t.Fatalf("output_json %v, want %v (output %q)", got, args, resp.GetOutput())
	}
	resp, err = invokeEcho(t, map[string]any{"msg": "plain words"})
	if err != nil || resp.GetOutput() != "plain words" || resp.GetOutputJson() != nil {
		t.Fatalf("plain text: %v %v, want output only", resp, err)
	}
}

func TestConfigValuesReachService(t *testing.T) {
	t.Parallel()
	resp, err := invokeEcho(t, map[string]any{"mode": "config"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOutput() != `{"mode-hint": "none"}` {
		t.Fatalf("config seen by service: %q", resp.GetOutput())
	}
}

func TestServiceErrorsMapToStatuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		typ    string
		code   codes.Code
		http   int
		reason string
	}{
		{"not-found", codes.NotFound, http.StatusNotFound, "not-found"},
		{"invalid-argument", codes.InvalidArgument, http.StatusBadRequest, "invalid-argument"},
		{"permission-denied", codes.PermissionDenied, http.StatusForbidden, "permission-denied"},
		{"too-many-requests", codes.ResourceExhausted, http.StatusTooManyRequests, "too-many-requests"},
		{"unavailable", codes.Unavailable, http.StatusServiceUnavailable, "unavailable"},
		{"", codes.Unknown, http.StatusInternalServerError, "tool-service-error"},
		{"something-new", codes.Unknown, http.StatusInternalServerError, "something-new"},
	}
	for _, c := range cases {
		t.Run(c.reason, func(t *testing.T) {
			t.Parallel()
			_, err := invokeEcho(t, map[string]any{"mode": "fail", "type": c.typ, "message": "no luck"})
			st := status.Convert(err)
			if st.Code() != c.code || st.Message() != "no luck" {
				t.Fatalf("gRPC: %v, want %v 'no luck'", err, c.code)
			}
			info := errorInfo(st)
			if info == nil || info.GetReason() != c.reason || info.GetMetadata()["tool"] != "echo" || info.GetMetadata()["service"] != "echo-service" {
				t.Fatalf("ErrorInfo %v, want reason %q with tool and service", info, c.reason)
			}
			code, body := post(t, "/v1/tools/echo:invoke", `{"arguments": {"mode": "fail", "type": "`+c.typ+`", "message": "no luck"}}`)
			if code != c.http || body["code"] != float64(c.code) || body["message"] != "no luck" {
				t.Fatalf("HTTP: %d %v, want %d", code, body, c.http)
			}
			details, _ := body["details"].([]any)
			if len(details) == 0 || details[0].(map[string]any)["reason"] != c.reason {
				t.Fatalf("HTTP details %v, want ErrorInfo with reason %q", body["details"], c.reason)
			}
		})
	}
}

func TestDeadlines(t *testing.T) {
	t.Parallel()
	code, body := post(t, "/v1/tools/echo:invoke", `{"arguments": {"mode": "sleep", "ms": 3000}, "timeout": "0.2s"}`)
	if code != http.StatusGatewayTimeout || body["code"] != float64(codes.DeadlineExceeded) {
		t.Fatalf("HTTP: %d %v, want 504 DEADLINE_EXCEEDED", code, body)
	}
	s, _ := structpb.NewStruct(map[string]any{"mode": "sleep", "ms": 3000.0})
	ctx, cancel := contextWithTimeout(t, 200)
	defer cancel()
	_, err := env.grpc.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: s})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("gRPC: %v, want DEADLINE_EXCEEDED", err)
	}
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

func TestNobodyListeningFailsFast(t *testing.T) {
	t.Parallel()
	// Not DEADLINE_EXCEEDED at the call's deadline: UNAVAILABLE at once.
	_, err := env.grpc.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "nobody-home"})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "non-persistent://tg/request/nobody-listens-here") {
		t.Fatalf("got %v, want UNAVAILABLE naming the topic", err)
	}
	if info := errorInfo(st); info.GetReason() != "NO_LISTENER" {
		t.Fatalf("ErrorInfo %v, want reason NO_LISTENER", info)
	}
	code, body := post(t, "/v1/tools/nobody-home:invoke", `{}`)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("HTTP %d %v, want 503", code, body)
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	t.Parallel()
	s, _ := structpb.NewStruct(map[string]any{"mode": "stream", "n": 3.0, "gap_ms": 2500.0})
	st, err := env.grpc.StreamTool(t.Context(), &toolgatev1.StreamToolRequest{Name: "echo", Arguments: s})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil || first.GetOutput() != "0," {
		t.Fatalf("first chunk %v %v", first, err)
	}
	_, err = st.Recv()
	if status.Code(err) != codes.DeadlineExceeded || errorInfo(status.Convert(err)).GetReason() != "STREAM_IDLE" {
		t.Fatalf("got %v, want DEADLINE_EXCEEDED (STREAM_IDLE) after the 1s idle timeout", err)
	}
}
