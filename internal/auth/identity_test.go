package auth

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// aliceKeys is an API key file whose one key is the user alice's.
const aliceKeys = `keys: [{hash: "sha256:85afddf4e6f8aeb1906be50a09e30a3260a78312890c20f72a8d18f951aa7a14", user: alice, roles: [admin]}]`

// alices is an authenticator taking alice's API key, JWTs of any issuer
// signed with the test secret, and client certificates of a test CA; with
// the policy when one is given. Its callers are API-key alice, and a JWT
// or certificate naming alice too.
type alices struct {
	a    *Authenticator
	cert *tls.ConnectionState // a verified certificate whose CommonName is alice
}

func newAlices(t *testing.T, policy string, opts ...Option) alices {
	t.Helper()
	k, err := ParseAPIKeys([]byte(aliceKeys))
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewJWTVerifier(JWTConfig{HS256Secret: keys(t).secret, RolesClaim: "roles"}) // any issuer
	if err != nil {
		t.Fatal(err)
	}
	all := []Option{WithAPIKeys(k), WithJWT(v), WithClientCerts()}
	if policy != "" {
		p, err := ParsePolicy([]byte(policy))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, WithPolicy(p))
	}
	a, err := New(append(all, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ca := newPKI(t, "test CA")
	server := &tls.Config{Certificates: []tls.Certificate{ca.issue(t, pkix.Name{CommonName: "gateway"}, x509.ExtKeyUsageServerAuth, []string{"gateway.test"})},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.pool, MinVersion: tls.VersionTLS13}
	client := &tls.Config{RootCAs: ca.pool, ServerName: "gateway.test", MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{ca.issue(t, pkix.Name{CommonName: "alice", OrganizationalUnit: []string{"admin"}}, x509.ExtKeyUsageClientAuth, nil)}}
	cs, err := handshake(t, server, client)
	if err != nil {
		t.Fatal(err)
	}
	return alices{a: a, cert: cs}
}

// calls are alice's calls by every source: name → a call of op on tool.
func (x alices) calls(t *testing.T, op toolcall.Op, tool string) map[string]*toolcall.Call {
	t.Helper()
	token := func(iss string) []string {
		c := jwt.MapClaims{"sub": "alice", "iat": claims("")["iat"], "exp": claims("")["exp"], "roles": []string{"admin"}}
		if iss != "" {
			c["iss"] = iss
		}
		return []string{"authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, keys(t).secret, "", c)}
	}
	cert := newCall(op, tool)
	cert.TLS = x.cert
	return map[string]*toolcall.Call{
		"api-key":            newCall(op, tool, "x-api-key", aliceKey),
		"jwt of issuer A":    newCall(op, tool, token("https://a.example")...),
		"jwt of issuer B":    newCall(op, tool, token("https://b.example")...),
		"jwt without issuer": newCall(op, tool, token("")...),
		"client certificate": cert,
	}
}

// TestOneNameFromFourSourcesIsFourCallers: alice by API key, by JWTs of
// two issuers and of none, and by certificate, are distinct callers: each
// has a key (operations' owner, rate-limit bucket) of its own.
func TestOneNameFromFourSourcesIsFourCallers(t *testing.T) {
	t.Parallel()
	x := newAlices(t, "")
	seen := map[string]string{}
	for name, c := range x.calls(t, toolcall.OpInvoke, "tell-joke") {
		if err := x.a.Authenticate(t.Context(), c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Caller.User != "alice" {
			t.Fatalf("%s: user %q, want alice", name, c.Caller.User)
		}
		k := c.Caller.Key()
		if other, dup := seen[k]; dup {
			t.Fatalf("%s and %s are both %q", name, other, k)
		}
		seen[k] = name
	}
	for _, want := range []string{"api-key:alice", "jwt(https://a.example):alice", "jwt(https://b.example):alice", "jwt:alice", "mtls:alice"} {
		if _, ok := seen[want]; !ok {
			t.Errorf("no caller %q among %v", want, seen)
		}
	}
}

// TestPolicyNamesOneSource: a rule naming alice or the role admin without
// a source grants the API key's alice and admins only — not a JWT or a
// certificate that says alice or admin; a qualified one grants exactly
// the source it names; "*" is everyone.
func TestPolicyNamesOneSource(t *testing.T) {
	t.Parallel()
	all := []string{"api-key", "jwt of issuer A", "jwt of issuer B", "jwt without issuer", "client certificate"}
	tests := []struct {
		policy  string
		granted []string
	}{
		{`rules: [{users: [alice], tools: ["*"], actions: ["*"]}]`, []string{"api-key"}},
		{`rules: [{users: ["ali*"], tools: ["*"], actions: ["*"]}]`, []string{"api-key"}},
		{`rules: [{roles: [admin], tools: ["*"], actions: ["*"]}]`, []string{"api-key"}},
		{`rules: [{users: ["api-key:alice"], tools: ["*"], actions: ["*"]}]`, []string{"api-key"}},
		{`rules: [{users: ["jwt(https://a.example):alice"], tools: ["*"], actions: ["*"]}]`, []string{"jwt of issuer A"}},
		{`rules: [{roles: ["jwt(https://b.example):admin"], tools: ["*"], actions: ["*"]}]`, []string{"jwt of issuer B"}},
		{`rules: [{users: ["jwt:alice"], tools: ["*"], actions: ["*"]}]`, []string{"jwt without issuer"}},
		{`rules: [{users: ["mtls:alice"], tools: ["*"], actions: ["*"]}]`, []string{"client certificate"}},
		{`rules: [{roles: ["mtls:admin"], tools: ["*"], actions: ["*"]}]`, []string{"client certificate"}},
		{`rules: [{users: ["*"], tools: ["*"], actions: ["*"]}]`, all},
	}
	for _, tc := range tests {
		x := newAlices(t, tc.policy)
		for name, c := range x.calls(t, toolcall.OpInvoke, "tell-joke") {
			_, err := run(t.Context(), x.a, c)
			want := codes.PermissionDenied
			for _, g := range tc.granted {
				if g == name {
					want = codes.OK
				}
			}
			if got := status.Code(err); got != want {
				t.Errorf("%s, alice by %s: %v (%v), want %v", tc.policy, name, got, err, want)
			}
		}
	}
}

// TestIdentitiesJoin: the policy's identities join a JWT's alice to the
// API key's on purpose: she acts as api-key:alice (same key, the rules
// naming it apply), and her own rules and roles still apply; others are
// not joined.
func TestIdentitiesJoin(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	x := newAlices(t, `
identities:
  - subject: "api-key:alice"
    aliases: ["jwt(https://a.example):alice"]
rules:
  - {users: ["api-key:alice"], tools: ["*"], actions: ["*"]}
  - {users: ["mtls:alice"], tools: ["cert-*"], actions: [invoke]}
`, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	calls := x.calls(t, toolcall.OpInvoke, "tell-joke")
	for name, want := range map[string]codes.Code{"api-key": codes.OK, "jwt of issuer A": codes.OK,
		"jwt of issuer B": codes.PermissionDenied, "jwt without issuer": codes.PermissionDenied, "client certificate": codes.PermissionDenied} {
		c := calls[name]
		_, err := run(t.Context(), x.a, c)
		if got := status.Code(err); got != want {
			t.Errorf("alice by %s: %v (%v), want %v", name, got, err, want)
		}
		joined := c.Caller.Key() == "api-key:alice"
		if joined != (name == "api-key" || name == "jwt of issuer A") {
			t.Errorf("alice by %s has key %q", name, c.Caller.Key())
		}
	}
	a := calls["jwt of issuer A"].Caller
	if a.User != "alice" || a.Subject().String() != "jwt(https://a.example):alice" || a.As.String() != "api-key:alice" {
		t.Errorf("the joined caller: %+v", a)
	}
	// The certificate's own rule still grants its own.
	cert := x.calls(t, toolcall.OpInvoke, "cert-x")["client certificate"]
	if _, err := run(t.Context(), x.a, cert); err != nil {
		t.Errorf("the certificate's own rule: %v", err)
	}
	// Refusals name the source.
	_, err := run(t.Context(), x.a, x.calls(t, toolcall.OpInvoke, "tell-joke")["jwt of issuer B"])
	checkStatus(t, err, codes.PermissionDenied, `user "alice" (jwt(https://b.example)) may not invoke tool "tell-joke"`)
	if log := buf.String(); !strings.Contains(log, "source=jwt(https://b.example)") {
		t.Errorf("the refusal's log line does not name the source:\n%s", log)
	}
}
