package limits

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ok is the handler behind the limiter: it answers "ok <tool>", a stream
// as one chunk.
func ok(_ context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
	if c.Op == toolcall.OpStream {
		return toolcall.Result{}, emit(toolcall.Chunk{Text: "ok " + c.Name, Last: true})
	}
	return toolcall.Result{Output: "ok " + c.Name}, nil
}

// userKey keys buckets by the "x-user" header, standing in for the
// authenticated caller.
func userKey(c *toolcall.Call) string {
	if v := c.Header.Values("x-user"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// header is a call's Header from pairs of lower-case names and values.
type header map[string][]string

func (h header) Values(key string) []string { return h[key] }

func TestMiddleware(t *testing.T) {
	t.Parallel()
	// One call a minute, bursts of two.
	l, err := New(1.0/60, 2, WithKey(userKey))
	if err != nil {
		t.Fatal(err)
	}
	h := toolcall.Chain(ok, l.Middleware())
	call := func(op toolcall.Op) func(context.Context, string) error {
		return func(ctx context.Context, user string) error {
			var got string
			c := &toolcall.Call{Op: op, Name: "t", Header: header{"x-user": {user}}}
			res, err := h(ctx, c, func(ch toolcall.Chunk) error { got += ch.Text; return nil })
			if op != toolcall.OpStream {
				got = res.Output
			}
			if err == nil && got != "ok t" {
				t.Fatalf("%s answered %q", op.Method(), got)
			}
			return err
		}
	}
	invoke, stream, list := call(toolcall.OpInvoke), call(toolcall.OpStream), call(toolcall.OpListTools)
	tests := []struct {
		name  string
		user  string
		calls []func(context.Context, string) error
		codes []codes.Code
	}{
		{"unary over the limit", "ann", []func(context.Context, string) error{invoke, invoke, invoke}, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
		{"streams over the limit", "ben", []func(context.Context, string) error{stream, stream, stream}, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
		{"unary and streams share the bucket", "cat", []func(context.Context, string) error{stream, invoke, stream}, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
		{"registry calls count too", "dan", []func(context.Context, string) error{list, invoke, list}, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for i, c := range tc.calls {
				err := c(t.Context(), tc.user)
				if status.Code(err) != tc.codes[i] {
					t.Fatalf("call %d: %v, want %v", i, err, tc.codes[i])
				}
				if tc.codes[i] == codes.ResourceExhausted {
					checkExceeded(t, err, time.Minute)
				}
			}
		})
	}
}

// TestMiddlewareKey: by default the bucket is the caller's user, as the
// authentication middleware (run before) sets it; callers without one
// share the bucket "".
func TestMiddlewareKey(t *testing.T) {
	t.Parallel()
	l, err := New(1.0/60, 1)
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int32
	next := func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
		reached.Add(1)
		return ok(ctx, c, emit)
	}
	// Stands in for auth: the caller is the "x-user" header.
	authn := func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			if u := userKey(c); u != "" {
				c.Caller, c.Authenticated = toolcall.Caller{User: u, Method: "api-key"}, true
			}
			return next(ctx, c, emit)
		}
	}
	h := toolcall.Chain(next, authn, l.Middleware())
	steps := []struct {
		user string // "" for no caller
		code codes.Code
	}{
		{"ann", codes.OK},
		{"ann", codes.ResourceExhausted},
		{"ben", codes.OK},
		{"", codes.OK},
		{"", codes.ResourceExhausted},
		{"ben", codes.ResourceExhausted},
	}
	for i, s := range steps {
		_, err := h(t.Context(), &toolcall.Call{Op: toolcall.OpInvoke, Name: "t", Header: header{"x-user": {s.user}}}, nil)
		if status.Code(err) != s.code {
			t.Fatalf("step %d (%q): %v, want %v", i, s.user, err, s.code)
		}
	}
	// A refused call never reaches the handler.
	if n := reached.Load(); n != 3 {
		t.Fatalf("the handler ran %d times, want 3", n)
	}
}

// TestMiddlewareBucketPerSource: the API key's alice and a JWT or a
// certificate naming alice are different callers, each with a bucket of
// its own: one emptying hers leaves the others theirs.
func TestMiddlewareBucketPerSource(t *testing.T) {
	t.Parallel()
	l, err := New(1.0/60, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := toolcall.Chain(ok, l.Middleware())
	as := func(c toolcall.Caller) error {
		_, err := h(t.Context(), &toolcall.Call{Op: toolcall.OpInvoke, Name: "t", Caller: c, Authenticated: true}, nil)
		return err
	}
	alices := []toolcall.Caller{
		{User: "alice", Method: "api-key"},
		{User: "alice", Method: "jwt", Issuer: "https://a.example"},
		{User: "alice", Method: "jwt", Issuer: "https://b.example"},
		{User: "alice", Method: "mtls"},
	}
	for i, c := range alices {
		if err := as(c); err != nil {
			t.Fatalf("alice %d (%s)'s first call: %v", i, c.Method, err)
		}
	}
	for i, c := range alices {
		if err := as(c); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("alice %d (%s)'s second call: %v, want her own bucket empty", i, c.Method, err)
		}
	}
	// Joined on purpose (the policy's identities): one bucket.
	joined := toolcall.Caller{User: "alice", Method: "jwt", Issuer: "https://c.example", As: toolcall.Subject{Source: "api-key", Name: "alice"}}
	if err := as(joined); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the JWT alice joined to the API key's: %v, want the API key's bucket, empty", err)
	}
}

// TestMiddlewareNoLimit: without a limit the middleware adds nothing.
func TestMiddlewareNoLimit(t *testing.T) {
	t.Parallel()
	l, err := New(0, 0, WithKey(func(*toolcall.Call) string { panic("no limit needs no key") }))
	if err != nil {
		t.Fatal(err)
	}
	h := toolcall.Chain(ok, l.Middleware())
	for i := range 100 {
		if _, err := h(t.Context(), &toolcall.Call{Op: toolcall.OpInvoke, Name: "t"}, nil); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if l.Len() != 0 {
		t.Fatalf("%d buckets without a limit", l.Len())
	}
}

// checkExceeded checks a refusal's message and details: a RetryInfo with
// a delay in (0, most], and an ErrorInfo.
func checkExceeded(t *testing.T, err error, most time.Duration) {
	t.Helper()
	st := status.Convert(err)
	var ri *errdetails.RetryInfo
	var ei *errdetails.ErrorInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.ErrorInfo:
			ei = d
		}
	}
	if ri == nil || ri.GetRetryDelay().AsDuration() <= 0 || ri.GetRetryDelay().AsDuration() > most {
		t.Fatalf("RetryInfo %v, want a delay in (0, %v]", ri, most)
	}
	if ei == nil || ei.GetReason() != ReasonRateLimited || ei.GetDomain() != ErrorDomain {
		t.Fatalf("ErrorInfo %v, want reason %s", ei, ReasonRateLimited)
	}
	if want := "rate limit exceeded: retry in "; !strings.HasPrefix(st.Message(), want) || len(st.Message()) <= len(want) {
		t.Fatalf("message %q", st.Message())
	}
}
