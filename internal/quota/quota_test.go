package quota

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file, wantErr string
	}{
		{"calls a minute", "rules: [{name: a, users: [\"api-key:alice\"], tools: [search], calls: 10, per: minute}]", ""},
		{"concurrent only", "rules: [{name: a, roles: [\"jwt(https://idp.example):intern\"], tools: [\"*\"], concurrent: 2}]", ""},
		{"json", `{"rules": [{"name": "a", "users": ["*"], "tools": ["q-*"], "calls": 5, "per": "day", "concurrent": 1}]}`, ""},
		{"no name", "rules: [{users: [\"*\"], tools: [\"*\"], calls: 1, per: second}]", "name is required"},
		{"duplicate name", "rules: [{name: a, users: [\"*\"], tools: [\"*\"], calls: 1, per: second}, {name: a, users: [\"*\"], tools: [\"*\"], concurrent: 1}]", "also the name of rules[0]"},
		{"no one", "rules: [{name: a, tools: [\"*\"], calls: 1, per: second}]", "name users or roles"},
		{"no tools", "rules: [{name: a, users: [\"*\"], calls: 1, per: second}]", "tools is required"},
		{"bad window", "rules: [{name: a, users: [\"*\"], tools: [\"*\"], calls: 1, per: week}]", `per "week"`},
		{"calls without window", "rules: [{name: a, users: [\"*\"], tools: [\"*\"], calls: 1}]", `per ""`},
		{"window without calls", "rules: [{name: a, users: [\"*\"], tools: [\"*\"], per: day, concurrent: 1}]", "calls is required"},
		{"no bound", "rules: [{name: a, users: [\"*\"], tools: [\"*\"]}]", "give calls"},
		{"bad subject", "rules: [{name: a, users: [\"ldap:alice\"], tools: [\"*\"], concurrent: 1}]", "unknown source"},
		{"bad glob", "rules: [{name: a, users: [\"*\"], tools: [\"[\"], concurrent: 1}]", `tools: pattern "[": a [ class is not closed`},
		{"unknown field", "rules: [{name: a, users: [\"*\"], tools: [\"*\"], concurrent: 1, burst: 3}]", "burst"},
		{"empty", "", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.file))
			if tc.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func caller(name string, roles ...string) toolcall.Caller {
	return toolcall.Caller{User: name, Method: toolcall.SourceAPIKey, Roles: roles}
}

func call(c toolcall.Caller, op toolcall.Op, tool string) *toolcall.Call {
	return &toolcall.Call{Op: op, Name: tool, Caller: c, Authenticated: true, Header: toolcall.NoHeader}
}

func ok(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
	return toolcall.Result{Output: "ok"}, nil
}

func mustRules(t *testing.T, file string) *Rules {
	t.Helper()
	r, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMiddlewareCalls(t *testing.T) {
	t.Parallel()
	rules := mustRules(t, `rules:
  - {name: alice-search, users: ["api-key:alice"], tools: [search], calls: 3, per: minute}
  - {name: interns, roles: [intern], tools: ["q-*"], calls: 1, per: day}
`)
	e := NewEnforcer(rules, NewMemory())
	h := e.Middleware()(ok)
	alice, bob, intern := caller("alice"), caller("bob"), caller("ivy", "intern")
	for i := range 3 {
		if _, err := h(t.Context(), call(alice, toolcall.OpInvoke, "search"), nil); err != nil {
			t.Fatalf("alice's call %d: %v", i+1, err)
		}
	}
	_, err := h(t.Context(), call(alice, toolcall.OpStream, "search"), nil)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("alice's 4th call: %v, want RESOURCE_EXHAUSTED", err)
	}
	var retry *errdetails.RetryInfo
	var info *errdetails.ErrorInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() <= 0 || retry.GetRetryDelay().AsDuration() > time.Minute {
		t.Errorf("RetryInfo %v: want the rest of the minute", retry)
	}
	if info == nil || info.GetReason() != ReasonQuotaExceeded || info.GetMetadata()["rule"] != "alice-search" || info.GetMetadata()["per"] != "minute" {
		t.Errorf("ErrorInfo %v", info)
	}
	if qf == nil || qf.GetViolations()[0].GetSubject() != "api-key:alice" {
		t.Errorf("QuotaFailure %v", qf)
	}
	// Others, other tools, and listing are not counted.
	for _, c := range []*toolcall.Call{call(bob, toolcall.OpInvoke, "search"), call(alice, toolcall.OpInvoke, "other"),
		call(alice, toolcall.OpListTools, ""), call(alice, toolcall.OpGetTool, "search")} {
		if _, err := h(t.Context(), c, nil); err != nil {
			t.Errorf("%s %v %s: %v, want no quota", c.Caller.User, c.Op, c.Name, err)
		}
	}
	// A role's rule: one call a day on every q-* tool together.
	if _, err := h(t.Context(), call(intern, toolcall.OpStartTool, "q-a"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h(t.Context(), call(intern, toolcall.OpInvoke, "q-b"), nil); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("intern's 2nd q-* call: %v", err)
	}
	if got := testutil.ToFloat64(e.refused.WithLabelValues("alice-search", "calls")); got != 1 {
		t.Errorf("refused{alice-search} = %v, want 1", got)
	}
}

// TestSubjectsWithSlashes: a rule's glob counts every caller it names,
// whatever its name holds: a JWT whose sub is a URL, a client certificate
// named by a SPIFFE ID. "jwt:*" with 3 calls a minute lets 3 of 6 calls
// by https://issuer.example/users/alice through, and the pattern may name
// a part of the URL or of the ID.
func TestSubjectsWithSlashes(t *testing.T) {
	t.Parallel()
	rules := mustRules(t, `rules:
  - {name: every-token, users: ["jwt:*"], tools: ["*"], calls: 3, per: minute}
  - {name: issuer-users, users: ["jwt(https://issuer.example):https://issuer.example/users/*"], tools: ["*"], calls: 2, per: minute}
  - {name: prod-agents, users: ["mtls:spiffe://example.org/ns/prod/*"], tools: ["*"], calls: 1, per: minute}
  - {name: agents-anywhere, users: ["mtls:spiffe://example.org/ns/*/sa/agent"], tools: [search], calls: 1, per: minute}
`)
	h := NewEnforcer(rules, NewMemory()).Middleware()(ok)
	refusedBy := func(c toolcall.Caller, tool string) string {
		_, err := h(t.Context(), call(c, toolcall.OpInvoke, tool), nil)
		if err == nil {
			return ""
		}
		for _, d := range status.Convert(err).Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				return info.GetMetadata()["rule"]
			}
		}
		return err.Error()
	}
	alice := toolcall.Caller{User: "https://issuer.example/users/alice", Method: toolcall.SourceJWT}
	var got []string
	for range 6 {
		got = append(got, refusedBy(alice, "search"))
	}
	if want := []string{"", "", "", "every-token", "every-token", "every-token"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("6 calls of %s under jwt:* (3 a minute) refused by %q, want %q", alice.User, got, want)
	}
	bob := toolcall.Caller{User: "https://issuer.example/users/team/bob", Method: toolcall.SourceJWT, Issuer: "https://issuer.example"}
	if got := []string{refusedBy(bob, "search"), refusedBy(bob, "search"), refusedBy(bob, "search")}; strings.Join(got, ",") != ",,issuer-users" {
		t.Errorf("bob under issuer-users (2 a minute): refused by %q", got)
	}
	agent := toolcall.Caller{User: "spiffe://example.org/ns/prod/sa/agent", Method: toolcall.SourceMTLS}
	if got := []string{refusedBy(agent, "other"), refusedBy(agent, "other")}; strings.Join(got, ",") != ",prod-agents" {
		t.Errorf("the prod agent under prod-agents (1 a minute): refused by %q", got)
	}
	staging := toolcall.Caller{User: "spiffe://example.org/ns/staging/sa/agent", Method: toolcall.SourceMTLS}
	if got := []string{refusedBy(staging, "search"), refusedBy(staging, "search"), refusedBy(staging, "other")}; strings.Join(got, ",") != ",agents-anywhere," {
		t.Errorf("the staging agent under agents-anywhere (search, 1 a minute) only: refused by %q", got)
	}
}

func TestMiddlewareConcurrent(t *testing.T) {
	t.Parallel()
	e := NewEnforcer(mustRules(t, `rules: [{name: two, users: ["*"], tools: ["*"], concurrent: 2}]`), NewMemory())
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(2)
	held := e.Middleware()(func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		started.Done()
		<-release
		return toolcall.Result{}, nil
	})
	h := e.Middleware()(ok)
	alice := caller("alice")
	done := make(chan error, 2)
	for range 2 {
		go func() { _, err := held(t.Context(), call(alice, toolcall.OpStream, "t"), nil); done <- err }()
	}
	started.Wait()
	_, err := h(t.Context(), call(alice, toolcall.OpInvoke, "t"), nil)
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "2 calls at once") {
		t.Fatalf("a third call at once: %v", err)
	}
	if _, err := h(t.Context(), call(caller("bob"), toolcall.OpInvoke, "t"), nil); err != nil {
		t.Fatalf("bob: %v", err)
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h(t.Context(), call(alice, toolcall.OpInvoke, "t"), nil); err != nil {
		t.Fatalf("once the calls ended: %v", err)
	}
}

// brokenStore cannot be asked.
type brokenStore struct{}

func (brokenStore) Take(context.Context, Take) (Decision, error) {
	return Decision{}, errors.New("connection refused")
}
func (brokenStore) Renew(context.Context, []Held, time.Duration) error {
	return errors.New("connection refused")
}
func (brokenStore) Release(context.Context, []Held) error {
	return errors.New("connection refused")
}

func TestMiddlewareStoreDown(t *testing.T) {
	t.Parallel()
	rules := mustRules(t, `rules: [{name: one, users: ["*"], tools: [search], calls: 1, per: second}]`)
	for _, tc := range []struct {
		name   string
		closed bool
		want   codes.Code
	}{{"fail open", false, codes.OK}, {"fail closed", true, codes.Unavailable}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := NewEnforcer(rules, brokenStore{}, WithFailClosed(tc.closed))
			h := e.Middleware()(ok)
			for range 3 {
				_, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "search"), nil)
				if status.Code(err) != tc.want {
					t.Fatalf("%v, want %v", err, tc.want)
				}
				if tc.closed {
					st := status.Convert(err)
					if len(st.Details()) != 2 || st.Details()[0].(*errdetails.RetryInfo) == nil {
						t.Fatalf("details %v: want a RetryInfo and an ErrorInfo", st.Details())
					}
				}
			}
			// A call no rule applies to never asks the store.
			if _, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "other"), nil); err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(e.storeErrors); got != 3 {
				t.Errorf("store errors %v, want 3", got)
			}
			wantOpen := 3.0
			if tc.closed {
				wantOpen = 0
			}
			if got := testutil.ToFloat64(e.failedOpen); got != wantOpen {
				t.Errorf("failed open %v, want %v", got, wantOpen)
			}
		})
	}
}

// TestMiddlewareRedisShared: two enforcers — two gateways — over one
// Redis share a caller's budget.
func TestMiddlewareRedisShared(t *testing.T) {
	t.Parallel()
	s := stores(t)["redis"]
	name := "shared-" + strings.ReplaceAll(key("r"), ":", "-")
	rules := mustRules(t, `rules: [{name: `+name+`, users: ["api-key:alice"], tools: [search], calls: 4, per: minute}]`)
	a, b := NewEnforcer(rules, s).Middleware()(ok), NewEnforcer(rules, s).Middleware()(ok)
	for i, h := range []toolcall.Handler{a, b, a, b} {
		if _, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "search"), nil); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	for _, h := range []toolcall.Handler{a, b} {
		if _, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "search"), nil); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("5th call: %v", err)
		}
	}
}
