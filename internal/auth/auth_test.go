package auth

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
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

// call invokes a tool with metadata pairs and returns the echoed caller.
func call(ctx context.Context, conn *grpc.ClientConn, tool string, md ...string) (string, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	resp, err := toolgatev1.NewToolServiceClient(conn).InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: tool})
	return resp.GetOutput(), err
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
	conn := serve(t, a)
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
			got, err := call(t.Context(), conn, "tell-joke", tc.md...)
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
	conn := serve(t, a)
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
			got, err := stream(t.Context(), conn, "tell-joke", tc.md...)
			checkStatus(t, err, tc.code, "")
			if got != tc.want {
				t.Fatalf("caller %q, want %q", got, tc.want)
			}
		})
	}
}

// stream opens StreamTool and returns the first chunk's output.
func stream(ctx context.Context, conn *grpc.ClientConn, tool string, md ...string) (string, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	s, err := toolgatev1.NewToolServiceClient(conn).StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: tool})
	if err != nil {
		return "", err
	}
	r, err := s.Recv()
	return r.GetOutput(), err
}

func TestAnonymous(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)), WithAnonymous("guest"))
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, a)
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
			got, err := call(t.Context(), conn, "tell-joke", tc.md...)
			checkStatus(t, err, tc.code, "")
			if got != tc.want {
				t.Fatalf("caller %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPublicMethods(t *testing.T) {
	t.Parallel()
	policy, err := LoadPolicy("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def, err := New(WithAPIKeys(mustKeys(t)), WithPolicy(policy))
	if err != nil {
		t.Fatal(err)
	}
	custom, err := New(WithAPIKeys(mustKeys(t)), WithPublicMethods("/toolgate.v1.ToolService/GetTool"))
	if err != nil {
		t.Fatal(err)
	}
	defConn, customConn := serve(t, def), serve(t, custom)
	health := func(conn *grpc.ClientConn) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}
	}
	getTool := func(conn *grpc.ClientConn) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := toolgatev1.NewToolServiceClient(conn).GetTool(ctx, &toolgatev1.GetToolRequest{Name: "x"})
			return err
		}
	}
	tests := []struct {
		name string
		call func(context.Context) error
		code codes.Code
	}{
		{"health check is public by default", health(defConn), codes.OK},
		{"tools are not public by default", getTool(defConn), codes.Unauthenticated},
		{"health check is not public when the list leaves it out", health(customConn), codes.Unauthenticated},
		{"a configured public method needs no credentials", getTool(customConn), codes.OK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkStatus(t, tc.call(t.Context()), tc.code, "")
		})
	}
}

func TestAuthorization(t *testing.T) {
	t.Parallel()
	policy, err := LoadPolicy("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(WithAPIKeys(mustKeys(t)), WithJWT(mustJWT(t)), WithPolicy(policy))
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, a)
	client := toolgatev1.NewToolServiceClient(conn)
	jwtFor := func(user string, roles ...string) []string {
		return []string{"authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, keys(t).secret, "", claims(user, func(c jwt.MapClaims) { c["roles"] = roles }))}
	}
	invoke := func(tool string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: tool})
			return err
		}
	}
	streamTool := func(tool string) func(context.Context) error {
		return func(ctx context.Context) error { _, err := stream(ctx, conn, tool); return err }
	}
	list := func(ctx context.Context) error {
		_, err := client.ListTools(ctx, &toolgatev1.ListToolsRequest{})
		return err
	}
	get := func(tool string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := client.GetTool(ctx, &toolgatev1.GetToolRequest{Name: tool})
			return err
		}
	}
	tests := []struct {
		name string
		md   []string
		call func(context.Context) error
		code codes.Code
	}{
		{"admin role invokes anything", []string{"x-api-key", aliceKey}, invoke("tell-joke"), codes.OK},
		{"admin role streams anything", []string{"x-api-key", aliceKey}, streamTool("tell-joke"), codes.OK},
		{"svc-* user invokes query-*", []string{"x-api-key", bobKey}, invoke("query-orders"), codes.OK},
		{"svc-* user streams query-*", []string{"x-api-key", bobKey}, streamTool("query-orders"), codes.OK},
		{"svc-* user may not invoke other tools", []string{"x-api-key", bobKey}, invoke("tell-joke"), codes.PermissionDenied},
		{"svc-* user may not stream other tools", []string{"x-api-key", bobKey}, streamTool("tell-joke"), codes.PermissionDenied},
		{"reader role lists", []string{"x-api-key", bobKey}, list, codes.OK},
		{"reader role gets any tool", []string{"x-api-key", bobKey}, get("tell-joke"), codes.OK},
		{"JWT admin role invokes", jwtFor("zoe", "admin"), invoke("tell-joke"), codes.OK},
		{"JWT user without rules may not list", jwtFor("zoe"), list, codes.PermissionDenied},
		{"JWT user without rules may not invoke", jwtFor("zoe", "writer"), invoke("query-x"), codes.PermissionDenied},
		{"unauthenticated is not authorized", nil, invoke("query-x"), codes.Unauthenticated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := metadata.AppendToOutgoingContext(t.Context(), tc.md...)
			checkStatus(t, tc.call(ctx), tc.code, "")
		})
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
		{"bad public pattern", []Option{WithAnonymous("guest"), WithPublicMethods("/x/[")}, "public methods"},
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

func TestUser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctx  context.Context
		want string
		ok   bool
	}{
		{"no identity", context.Background(), "", false},
		{"identity", newContext(context.Background(), Identity{User: "u", Method: MethodJWT}), "u", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ok := FromContext(tc.ctx)
			if got := User(tc.ctx); got != tc.want || ok != tc.ok {
				t.Fatalf("User = %q (FromContext ok %v), want %q (%v)", got, ok, tc.want, tc.ok)
			}
		})
	}
}
