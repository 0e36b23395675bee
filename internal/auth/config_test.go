package auth

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
)

func TestFromConfig(t *testing.T) {
	t.Parallel()
	bad := []struct {
		name string
		c    Config
		want string
	}{
		{"nothing", Config{}, "nothing to authenticate with"},
		{"missing key file", Config{APIKeys: "testdata/nope.yaml"}, "nope.yaml"},
		{"missing secret", Config{JWTSecretFile: "testdata/nope"}, "--jwt-hs256-secret-file"},
		{"missing JWKS", Config{JWTJWKSFile: "testdata/nope"}, "--jwt-jwks-file"},
		{"missing policy", Config{AllowAnonymous: true, DefaultUser: "u", Policy: "testdata/nope.yaml"}, "nope.yaml"},
		{"anonymous without a user", Config{AllowAnonymous: true}, "anonymous calls need a user name"},
	}
	for _, tc := range bad {
		if _, err := FromConfig(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	a, err := FromConfig(Config{APIKeys: "testdata/apikeys.yaml", Policy: "testdata/policy.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.bearer(aliceKey, apiKeyMD)
	if err != nil || id.User != "alice" {
		t.Fatalf("alice's key: %v, %v", id, err)
	}
	// The policy from the file is the one applied, to calls and to lists.
	svc := &toolcall.Call{Op: toolcall.OpInvoke, Caller: Identity{User: "svc-x", Method: MethodAPIKey}, Authenticated: true}
	if !a.Visible(svc, "query-a") || a.Visible(svc, "other") || a.Visible(&toolcall.Call{Op: toolcall.OpListTools}, "query-a") {
		t.Error("the policy from the file is not the one Visible applies")
	}
	for tool, code := range map[string]codes.Code{"query-a": codes.OK, "other": codes.PermissionDenied} {
		c := &toolcall.Call{Op: toolcall.OpInvoke, Name: tool, Caller: svc.Caller, Authenticated: true}
		_, err := run(t.Context(), a, c)
		checkStatus(t, err, code, "")
	}
	open, err := FromConfig(Config{AllowAnonymous: true, DefaultUser: "anon"})
	if err != nil {
		t.Fatal(err)
	}
	if !open.Visible(&toolcall.Call{}, "anything") {
		t.Fatal("no policy must let every tool be listed")
	}
	if got, err := run(t.Context(), open, &toolcall.Call{Op: toolcall.OpInvoke, Name: "anything", Header: toolcall.NoHeader}); err != nil || got != "anon|anonymous|" {
		t.Fatalf("no policy must allow everything: %q, %v", got, err)
	}
}

// TestVisible replaces the context-based Allowed: Visible answers for
// the call's caller, and only for a caller the middleware authenticated.
func TestVisible(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)), WithPolicy(mustPolicy(t)), WithAnonymous("guest"))
	if err != nil {
		t.Fatal(err)
	}
	open, err := New(WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	authed := func(a *Authenticator, md ...string) *toolcall.Call {
		c := newCall(toolcall.OpListTools, "", md...)
		if err := a.Authenticate(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	tests := []struct {
		name string
		a    *Authenticator
		c    *toolcall.Call
		tool string
		want bool
	}{
		{"admin sees everything", a, authed(a, "x-api-key", aliceKey), "tell-joke", true},
		{"reader sees everything", a, authed(a, "x-api-key", bobKey), "tell-joke", true},
		{"a user without rules sees nothing", a, authed(a), "tell-joke", false},
		{"a caller named but not authenticated sees nothing", a, &toolcall.Call{Caller: Identity{User: "alice", Roles: []string{"admin"}, Method: MethodAPIKey}}, "tell-joke", false},
		{"svc-* sees query-*", a, &toolcall.Call{Caller: Identity{User: "svc-x", Method: MethodAPIKey}, Authenticated: true}, "query-a", true},
		{"svc-* does not see other tools", a, &toolcall.Call{Caller: Identity{User: "svc-x", Method: MethodAPIKey}, Authenticated: true}, "tell-joke", false},
		{"without a policy everything is visible", open, authed(open, "x-api-key", bobKey), "tell-joke", true},
	}
	for _, tc := range tests {
		if got := tc.a.Visible(tc.c, tc.tool); got != tc.want {
			t.Errorf("%s: Visible(%+v, %q) = %v, want %v", tc.name, tc.c.Caller, tc.tool, got, tc.want)
		}
	}
}
