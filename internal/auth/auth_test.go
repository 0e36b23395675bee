package auth

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/toolcall"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	aliceKey = "alice-test-key-not-secret"
	bobKey   = "bob-test-key-not-secret"
)

func mustKeys(t *testing.T) *APIKeys {
	t.Helper()
	k, err := LoadAPIKeys("testdata/apikeys.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustJWT(t *testing.T) *JWTVerifier {
	t.Helper()
	v, err := NewJWTVerifier(JWTConfig{
		HS256Secret: keys(t).secret,
		JWKS:        keys(t).jwks,
		Issuer:      testIssuer,
		Audience:    testAudience,
		RolesClaim:  "roles",
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustPolicy(t *testing.T) *Policy {
	t.Helper()
	p, err := LoadPolicy("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func checkStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("code %v (%v), want %v", status.Code(err), err, code)
	}
	if msg != "" && !strings.Contains(status.Convert(err).Message(), msg) {
		t.Fatalf("message %q, want it to contain %q", status.Convert(err).Message(), msg)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	k := keys(t)
	a, err := New(WithAPIKeys(mustKeys(t)), WithJWT(mustJWT(t)), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	other := make([]byte, 32)
	copy(other, "a different secret of 32 bytes..")
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, k.secret, "", c) }
	bearer := func(s string) []string { return []string{"authorization", "Bearer " + s} }

	tests := []struct {
		name string
		md   []string
		code codes.Code
		msg  string // substring of the status message
		want string // echoed caller when code is OK
	}{
		{"no credential", nil, codes.Unauthenticated, MsgMissingCredentials, ""},
		{"bad key", bearer("not-a-key"), codes.Unauthenticated, "invalid API key", ""},
		{"valid key as bearer", bearer(aliceKey), codes.OK, "", "alice|api-key|admin"},
		{"valid key, lower-case scheme", []string{"authorization", "bearer " + bobKey}, codes.OK, "", "svc-bob|api-key|reader"},
		{"valid key as x-api-key", []string{"x-api-key", bobKey}, codes.OK, "", "svc-bob|api-key|reader"},
		{"two credentials", append(bearer(aliceKey), "x-api-key", bobKey), codes.Unauthenticated, "send one credential", ""},
		{"two authorization values", append(bearer(aliceKey), bearer(bobKey)...), codes.Unauthenticated, "send one credential", ""},
		{"empty x-api-key", []string{"x-api-key", " "}, codes.Unauthenticated, "empty X-Api-Key", ""},
		{"basic scheme", []string{"authorization", "Basic YWxpY2U6cHc="}, codes.Unauthenticated, "Bearer", ""},
		{"empty bearer", []string{"authorization", "Bearer "}, codes.Unauthenticated, "Bearer", ""},
		{"valid HS256", bearer(hs(claims("dora"))), codes.OK, "", "dora|jwt|reader"},
		{"expired HS256", bearer(hs(claims("dora", func(c jwt.MapClaims) {
			c["exp"] = time.Now().Add(-time.Hour).Unix()
			c["iat"] = time.Now().Add(-2 * time.Hour).Unix()
		}))), codes.Unauthenticated, "token expired", ""},
		{"no exp", bearer(hs(claims("dora", func(c jwt.MapClaims) { delete(c, "exp") }))), codes.Unauthenticated, "invalid token", ""},
		{"not yet valid", bearer(hs(claims("dora", func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() }))), codes.Unauthenticated, "token not valid yet", ""},
		{"wrong audience", bearer(hs(claims("dora", func(c jwt.MapClaims) { c["aud"] = "someone-else" }))), codes.Unauthenticated, "invalid token", ""},
		{"wrong issuer", bearer(hs(claims("dora", func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }))), codes.Unauthenticated, "invalid token", ""},
		{"no user claim", bearer(hs(claims("", func(c jwt.MapClaims) { delete(c, "sub") }))), codes.Unauthenticated, "invalid token", ""},
		{"HS256 with another secret", bearer(sign(t, jwt.SigningMethodHS256, other, "", claims("dora"))), codes.Unauthenticated, "invalid token", ""},
		{"valid RS256 with kid", bearer(sign(t, jwt.SigningMethodRS256, k.rsa, "rsa-1", claims("erin"))), codes.OK, "", "erin|jwt|reader"},
		{"valid ES256 with kid", bearer(sign(t, jwt.SigningMethodES256, k.ec, "ec-1", claims("fred"))), codes.OK, "", "fred|jwt|reader"},
		{"valid ES256 without kid", bearer(sign(t, jwt.SigningMethodES256, k.ec, "", claims("fred"))), codes.OK, "", "fred|jwt|reader"},
		{"RS256 by an unknown key", bearer(sign(t, jwt.SigningMethodRS256, k.rsaOther, "rsa-1", claims("erin"))), codes.Unauthenticated, "invalid token", ""},
		{"RS256 with an unknown kid", bearer(sign(t, jwt.SigningMethodRS256, k.rsa, "nope", claims("erin"))), codes.Unauthenticated, "invalid token", ""},
		{"kid of a key for another alg", bearer(sign(t, jwt.SigningMethodRS256, k.rsa, "ec-1", claims("erin"))), codes.Unauthenticated, "invalid token", ""},
		{"alg none", bearer(sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", claims("mallory"))), codes.Unauthenticated, "invalid token", ""},
		{"JWT in x-api-key is a key", []string{"x-api-key", hs(claims("dora"))}, codes.Unauthenticated, "invalid API key", ""},
		{"spoofed user metadata alone", []string{"x-toolgate-user", "admin"}, codes.Unauthenticated, "reserved", ""},
		{"spoofed user metadata with a valid key", append(bearer(bobKey), "x-toolgate-user", "alice"), codes.Unauthenticated, "reserved", ""},
		{"other metadata is ignored", append(bearer(bobKey), "x-user", "alice", "user", "alice"), codes.OK, "", "svc-bob|api-key|reader"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := grpcRun(t.Context(), a, newCall(toolcall.OpInvoke, "tell-joke", tc.md...))
			checkStatus(t, err, tc.code, tc.msg)
			if got != tc.want {
				t.Fatalf("caller %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAuthenticationHTTPHeader: the HTTP doors hand over their request
// header as httpcall.Header; credentials in it are read the same way,
// whatever the letter case of the header names.
func TestAuthenticationHTTPHeader(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)), WithJWT(mustJWT(t)))
	if err != nil {
		t.Fatal(err)
	}
	hs := sign(t, jwt.SigningMethodHS256, keys(t).secret, "", claims("dora"))
	tests := []struct {
		name   string
		header map[string]string
		code   codes.Code
		msg    string
		want   string
	}{
		{"no credential", nil, codes.Unauthenticated, MsgMissingCredentials, ""},
		{"X-Api-Key", map[string]string{"X-Api-Key": bobKey}, codes.OK, "", "svc-bob|api-key|reader"},
		{"x-api-key in lower case", map[string]string{"x-api-key": aliceKey}, codes.OK, "", "alice|api-key|admin"},
		{"Authorization: Bearer key", map[string]string{"Authorization": "Bearer " + aliceKey}, codes.OK, "", "alice|api-key|admin"},
		{"Authorization: Bearer JWT", map[string]string{"authorization": "Bearer " + hs}, codes.OK, "", "dora|jwt|reader"},
		{"bad key", map[string]string{"X-Api-Key": "nope"}, codes.Unauthenticated, "invalid API key", ""},
		{"two credentials", map[string]string{"X-Api-Key": bobKey, "Authorization": "Bearer " + aliceKey}, codes.Unauthenticated, "send one credential", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tc.header {
				h.Add(k, v) // canonicalizes k, as net/http does
			}
			got, err := run(t.Context(), a, &toolcall.Call{Op: toolcall.OpInvoke, Name: "tell-joke", Header: httpcall.Header(h)})
			checkStatus(t, err, tc.code, tc.msg)
			if got != tc.want {
				t.Fatalf("caller %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStreamAuthentication(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		md   []string
		code codes.Code
		want string
	}{
		{"no credential", nil, codes.Unauthenticated, ""},
		{"valid key", []string{"x-api-key", aliceKey}, codes.OK, "alice|api-key|admin"},
		{"spoofed user", []string{"x-toolgate-user", "alice"}, codes.Unauthenticated, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := grpcRun(t.Context(), a, newCall(toolcall.OpStream, "tell-joke", tc.md...))
			checkStatus(t, err, tc.code, "")
			if got != tc.want {
				t.Fatalf("caller %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAnonymous(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)), WithAnonymous("guest"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		md   []string
		code codes.Code
		want string
	}{
		{"no credential is the anonymous user", nil, codes.OK, "guest|anonymous|"},
		{"a bad key does not fall back", []string{"x-api-key", "wrong"}, codes.Unauthenticated, ""},
		{"a good key is used", []string{"x-api-key", aliceKey}, codes.OK, "alice|api-key|admin"},
		{"spoofing is refused", []string{"x-toolgate-user", "alice"}, codes.Unauthenticated, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := grpcRun(t.Context(), a, newCall(toolcall.OpInvoke, "tell-joke", tc.md...))
			checkStatus(t, err, tc.code, "")
			if got != tc.want {
				t.Fatalf("caller %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNothingIsPublic replaces the test of public methods (health checks
// and reflection are no longer calls): every op needs credentials, with
// or without a policy.
func TestNothingIsPublic(t *testing.T) {
	t.Parallel()
	withPolicy, err := New(WithAPIKeys(mustKeys(t)), WithPolicy(mustPolicy(t)))
	if err != nil {
		t.Fatal(err)
	}
	open, err := New(WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []*Authenticator{withPolicy, open} {
		for _, op := range []toolcall.Op{toolcall.OpInvoke, toolcall.OpStream, toolcall.OpListTools, toolcall.OpGetTool, toolcall.OpListServices, toolcall.OpGetService} {
			reached := false
			next := func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
				reached = true
				return toolcall.Result{}, nil
			}
			_, err := toolcall.Chain(next, a.Middleware())(t.Context(), newCall(op, "x"), func(toolcall.Chunk) error { return nil })
			checkStatus(t, err, codes.Unauthenticated, MsgMissingCredentials)
			if reached {
				t.Fatalf("%s without credentials reached the handler", op.Method())
			}
		}
	}
}

func TestAuthorization(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)), WithJWT(mustJWT(t)), WithPolicy(mustPolicy(t)))
	if err != nil {
		t.Fatal(err)
	}
	jwtFor := func(user string, roles ...string) []string {
		return []string{"authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, keys(t).secret, "", claims(user, func(c jwt.MapClaims) { c["roles"] = roles }))}
	}
	alice, bob := []string{"x-api-key", aliceKey}, []string{"x-api-key", bobKey}
	const (
		invoke      = toolcall.OpInvoke
		stream      = toolcall.OpStream
		list        = toolcall.OpListTools
		get         = toolcall.OpGetTool
		services    = toolcall.OpListServices
		service     = toolcall.OpGetService
		unknownOp   = toolcall.Op(0)
		denied      = codes.PermissionDenied
		unauthentic = codes.Unauthenticated
	)
	tests := []struct {
		name string
		md   []string
		op   toolcall.Op
		tool string
		code codes.Code
		msg  string
	}{
		{"admin role invokes anything", alice, invoke, "tell-joke", codes.OK, ""},
		{"admin role streams anything", alice, stream, "tell-joke", codes.OK, ""},
		{"svc-* user invokes query-*", bob, invoke, "query-orders", codes.OK, ""},
		{"svc-* user streams query-*", bob, stream, "query-orders", codes.OK, ""},
		{"svc-* user may not invoke other tools", bob, invoke, "tell-joke", denied, `permission denied: user "svc-bob" (api-key) may not invoke tool "tell-joke"`},
		{"svc-* user may not stream other tools", bob, stream, "tell-joke", denied, `permission denied: user "svc-bob" (api-key) may not invoke tool "tell-joke"`},
		{"reader role lists", bob, list, "", codes.OK, ""},
		{"reader role gets any tool", bob, get, "tell-joke", codes.OK, ""},
		{"reader role lists services", bob, services, "", codes.OK, ""},
		{"reader role gets a service", bob, service, "svc-1", codes.OK, ""},
		{"JWT admin role invokes", jwtFor("zoe", "admin"), invoke, "tell-joke", codes.OK, ""},
		{"JWT user without rules may not list", jwtFor("zoe"), list, "", denied, `permission denied: user "zoe" (jwt(https://issuer.test)) may not list tools`},
		{"JWT user without rules may not get a tool", jwtFor("zoe"), get, "tell-joke", denied, `permission denied: user "zoe" (jwt(https://issuer.test)) may not list tool "tell-joke"`},
		{"JWT user without rules may not get a service", jwtFor("zoe"), service, "svc-1", denied, `permission denied: user "zoe" (jwt(https://issuer.test)) may not list tools`},
		{"JWT user without rules may not invoke", jwtFor("zoe", "writer"), invoke, "query-x", denied, `permission denied: user "zoe" (jwt(https://issuer.test)) may not invoke tool "query-x"`},
		{"an op the policy does not cover is denied", alice, unknownOp, "tell-joke", denied, "is not covered by the access policy"},
		{"unauthenticated is not authorized", nil, invoke, "query-x", unauthentic, MsgMissingCredentials},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := run(t.Context(), a, newCall(tc.op, tc.tool, tc.md...))
			checkStatus(t, err, tc.code, tc.msg)
			if tc.code != codes.OK && got != "" {
				t.Fatalf("a refused call reached the handler: %q", got)
			}
		})
	}
}

// TestAuthenticateDoesNotAuthorize: Authenticate, which a door may call
// before it makes any call (MCP's 401), establishes the caller and
// refuses bad credentials, but leaves authorization to the Middleware.
// The Middleware then does not authenticate the call again.
func TestAuthenticateDoesNotAuthorize(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)), WithPolicy(mustPolicy(t)))
	if err != nil {
		t.Fatal(err)
	}
	c := newCall(toolcall.OpInvoke, "tell-joke", "x-api-key", bobKey)
	if err := a.Authenticate(t.Context(), c); err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if got := describe(c); got != "svc-bob|api-key|reader" {
		t.Fatalf("caller %q after Authenticate", got)
	}
	_, err = run(t.Context(), a, c)
	checkStatus(t, err, codes.PermissionDenied, `user "svc-bob" (api-key) may not invoke tool "tell-joke"`)

	bad := newCall(toolcall.OpInvoke, "tell-joke", "x-api-key", "nope")
	checkStatus(t, a.Authenticate(t.Context(), bad), codes.Unauthenticated, "invalid API key")
	if bad.Authenticated || bad.Caller.User != "" {
		t.Fatalf("a refused call has a caller: %+v", bad.Caller)
	}

	// A call a door already authenticated keeps its caller.
	done := newCall(toolcall.OpInvoke, "query-x", "x-api-key", "nope")
	done.Caller, done.Authenticated = Identity{User: "svc-x", Method: MethodAPIKey}, true
	got, err := run(t.Context(), a, done)
	if err != nil || got != "svc-x|api-key|" {
		t.Fatalf("pre-authenticated call: %q, %v", got, err)
	}
}

// TestMiddlewareSetsCaller replaces the test of the context identity
// (FromContext, User): the caller is in the call the next handler gets,
// and a call that fails authentication never reaches it.
func TestMiddlewareSetsCaller(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	var seen *toolcall.Call
	next := func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		seen = c
		return toolcall.Result{Output: "ok"}, nil
	}
	h := toolcall.Chain(next, a.Middleware())
	c := newCall(toolcall.OpInvoke, "tell-joke", "x-api-key", aliceKey)
	if res, err := h(t.Context(), c, nil); err != nil || res.Output != "ok" {
		t.Fatalf("call: %+v, %v", res, err)
	}
	if seen != c || !c.Authenticated || c.Caller.User != "alice" || c.Caller.Method != MethodAPIKey || !c.Caller.HasRole("admin") {
		t.Fatalf("the handler saw %+v", seen)
	}
	seen = nil
	c = newCall(toolcall.OpInvoke, "tell-joke")
	if _, err := h(t.Context(), c, nil); status.Code(err) != codes.Unauthenticated || seen != nil || c.Authenticated {
		t.Fatalf("a call without credentials: %v, reached the handler %v, authenticated %v", err, seen != nil, c.Authenticated)
	}
}

// TestRefusalLog: a refusal is logged with its reason and the call's
// method and peer, never with the credential.
func TestRefusalLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	a, err := New(WithAPIKeys(mustKeys(t)), WithPolicy(mustPolicy(t)), WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	c := newCall(toolcall.OpInvoke, "tell-joke", "x-api-key", "secret-wrong-key")
	c.Peer = "192.0.2.7:5555"
	_, err = run(t.Context(), a, c)
	checkStatus(t, err, codes.Unauthenticated, "invalid API key")
	_, err = run(t.Context(), a, newCall(toolcall.OpInvoke, "tell-joke", "x-api-key", bobKey))
	checkStatus(t, err, codes.PermissionDenied, "")
	log := buf.String()
	for _, want := range []string{"not authenticated", `reason="invalid API key"`, "rpc=" + toolcall.MethodInvoke, "peer=192.0.2.7:5555", "not authorized", "user=svc-bob", "source=api-key", "tool=tell-joke"} {
		if !strings.Contains(log, want) {
			t.Errorf("log does not mention %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, "secret-wrong-key") {
		t.Errorf("the log holds the credential:\n%s", log)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    []Option
		wantErr string
	}{
		{"nothing to authenticate with", nil, "nothing to authenticate with"},
		{"anonymous without a name", []Option{WithAnonymous(" ")}, "need a user name"},
		{"anonymous only", []Option{WithAnonymous("guest")}, ""},
		{"client certificates only", []Option{WithClientCerts()}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tc.opts...)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestRefusalInASetNamesTheSetsTool: in a tool set that shows the
// registry's tell-joke as desk-joke, the policy decides on tell-joke, and
// its refusal names desk-joke — in the message and the ErrorInfo — never
// the name the set hides.
func TestRefusalInASetNamesTheSetsTool(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)), WithPolicy(mustPolicy(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []toolcall.Op{toolcall.OpInvoke, toolcall.OpStream, toolcall.OpStartTool} {
		c := newCall(op, "tell-joke", "x-api-key", bobKey) // svc-bob may invoke query-* only
		c.Set, c.Shown = "desk", "desk-joke"
		_, err := run(t.Context(), a, c)
		checkStatus(t, err, codes.PermissionDenied, `permission denied: user "svc-bob" (api-key) may not invoke tool "desk-joke"`)
		var info *errdetails.ErrorInfo
		for _, d := range status.Convert(err).Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok {
				info = ei
			}
		}
		if strings.Contains(status.Convert(err).Message(), "tell-joke") || info.GetMetadata()["tool"] != "desk-joke" || info.GetMetadata()["tool_set"] != "desk" {
			t.Errorf("%s in desk: %v, ErrorInfo %v: want desk-joke in desk, never tell-joke", op.Method(), err, info)
		}
	}
}

// TestAuthenticationThenAuthorization: the two middlewares the gateway
// runs with a step between them (a tool set resolving its name for a
// tool): the caller is established once, before the step, and the policy
// decides on the name the step leaves — svc-bob may invoke query-orders,
// which the set shows as "orders", and not tell-joke, shown as "joke".
// Authorization without authentication before it refuses every call.
func TestAuthenticationThenAuthorization(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)), WithPolicy(mustPolicy(t)))
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			if !c.Authenticated {
				t.Error("the step between the two saw no caller")
			}
			c.Name = map[string]string{"orders": "query-orders", "joke": "tell-joke"}[c.Name]
			return next(ctx, c, emit)
		}
	}
	chain := toolcall.Chain(echo, a.Authentication(), resolve, a.Authorization())
	res, err := chain(t.Context(), newCall(toolcall.OpInvoke, "orders", "x-api-key", bobKey), nil)
	if err != nil || res.Output != "svc-bob|api-key|reader" {
		t.Fatalf("orders: %q %v, want svc-bob through", res.Output, err)
	}
	_, err = chain(t.Context(), newCall(toolcall.OpInvoke, "joke", "x-api-key", bobKey), nil)
	checkStatus(t, err, codes.PermissionDenied, `may not invoke tool "tell-joke"`)
	_, err = chain(t.Context(), newCall(toolcall.OpInvoke, "orders"), nil)
	checkStatus(t, err, codes.Unauthenticated, MsgMissingCredentials)

	reached := false
	next := func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		reached = true
		return toolcall.Result{}, nil
	}
	_, err = toolcall.Chain(next, a.Authorization())(t.Context(), newCall(toolcall.OpInvoke, "query-orders", "x-api-key", bobKey), nil)
	checkStatus(t, err, codes.Internal, "without authentication")
	if reached {
		t.Error("an unauthenticated call went through authorization")
	}
}
