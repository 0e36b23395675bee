package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// authServer is an OAuth 2.0 authorization server for the tests: RFC 8414
// metadata and a token endpoint of the client_credentials grant, whose
// access tokens are ES256 JWTs for the resource the client names
// (RFC 8707), signed with a key the test makes.
type authServer struct {
	issuer string
	key    *ecdsa.PrivateKey
	kid    string
	client struct{ id, secret string }

	mu        sync.Mutex
	resources []string // the resource parameter of each token request
}

func newAuthServer(t *testing.T) *authServer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a := &authServer{key: key, kid: "test-key-1"}
	a.client.id, a.client.secret = "agent-7", "client-secret-for-tests"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                a.issuer,
			"authorization_endpoint":                a.issuer + "/authorize", // not served: no user in these tests
			"token_endpoint":                        a.issuer + "/token",
			"grant_types_supported":                 []string{"client_credentials"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic"},
			"response_types_supported":              []string{"code"},
		})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if err := r.ParseForm(); err != nil || !ok || id != a.client.id || secret != a.client.secret || r.PostForm.Get("grant_type") != "client_credentials" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"invalid_client"}`)
			return
		}
		resource := r.PostForm.Get("resource")
		a.mu.Lock()
		a.resources = append(a.resources, resource)
		a.mu.Unlock()
		tok, err := a.sign(a.issuer, "oauth-"+id, resource, 5*time.Minute, a.key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"access_token": tok,
			"token_type":   "Bearer", "expires_in": 300, "scope": r.PostForm.Get("scope"),
		})
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	a.issuer = hs.URL
	return a
}

// sign is an ES256 JWT signed with key under the server's key id.
func (a *authServer) sign(iss, sub, aud string, exp time.Duration, key *ecdsa.PrivateKey) (string, error) {
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": iss, "sub": sub, "aud": aud, "exp": time.Now().Add(exp).Unix(), "iat": time.Now().Add(-time.Minute).Unix(),
	})
	tok.Header["kid"] = a.kid
	return tok.SignedString(key)
}

func (a *authServer) token(t *testing.T, iss, sub, aud string, exp time.Duration, key *ecdsa.PrivateKey) string {
	t.Helper()
	s, err := a.sign(iss, sub, aud, exp, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jwks is the JSON Web Key Set of the server's public key.
func (a *authServer) jwks() string {
	b64 := func(n *big.Int) string { return base64.RawURLEncoding.EncodeToString(n.FillBytes(make([]byte, 32))) }
	b, _ := json.Marshal(map[string]any{"keys": []map[string]any{{
		"kty": "EC", "crv": "P-256", "kid": a.kid, "alg": "ES256", "use": "sig",
		"x": b64(a.key.X), "y": b64(a.key.Y),
	}}})
	return string(b)
}

// oauthGateway is a gateway whose MCP endpoint is an OAuth protected
// resource of as: it accepts the JWTs as issues for it and nothing else.
type oauthGateway struct {
	base, resource string
}

func startOAuthGateway(t *testing.T, as *authServer) *oauthGateway {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	addr := freeAddr(t)
	g := &oauthGateway{base: "http://" + addr, resource: "http://" + addr + "/mcp"}
	runGateway(t, nil, "--http-addr", addr, "--registry", write("registry.yaml", mcpRegistry("")),
		"--jwt-jwks-file", write("jwks.json", as.jwks()), "--jwt-issuer", as.issuer,
		"--mcp-resource", g.resource, "--mcp-scopes", "tools")
	if err := waitReady(g.base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestMCPOAuth: the MCP endpoint as a protected resource (RFC 9728). Its
// metadata names the resource, the issuer and the scopes; a request
// without a token gets 401 with a challenge pointing at the metadata; a
// JWT of the issuer is accepted only for this resource's audience, and
// only while it lasts.
func TestMCPOAuth(t *testing.T) {
	as := newAuthServer(t)
	g := startOAuthGateway(t, as)

	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(g.base + path)
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			ScopesSupported      []string `json:"scopes_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&md)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || md.Resource != g.resource ||
			!slices.Equal(md.AuthorizationServers, []string{as.issuer}) || !slices.Equal(md.ScopesSupported, []string{"tools"}) {
			t.Errorf("GET %s: %d %+v %v", path, resp.StatusCode, md, err)
		}
	}

	post := func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, g.resource, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
		}
		return resp.StatusCode, string(body)
	}
	metadata := fmt.Sprintf(`resource_metadata="%s/.well-known/oauth-protected-resource/mcp"`, g.base)
	if code, challenge := post(""); code != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer ") ||
		!strings.Contains(challenge, metadata) || !strings.Contains(challenge, `scope="tools"`) {
		t.Errorf("without a token: %d %s; want 401 with %s", code, challenge, metadata)
	}

	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"this resource's audience", as.token(t, as.issuer, "svc", g.resource, time.Minute, as.key), true},
		{"another audience", as.token(t, as.issuer, "svc", "https://other.example.com/mcp", time.Minute, as.key), false},
		{"no audience", as.token(t, as.issuer, "svc", "", time.Minute, as.key), false},
		{"expired", as.token(t, as.issuer, "svc", g.resource, -5*time.Minute, as.key), false},
		{"another issuer", as.token(t, "https://elsewhere.example.com", "svc", g.resource, time.Minute, as.key), false},
		{"another key", as.token(t, as.issuer, "svc", g.resource, time.Minute, other), false},
	} {
		code, got := post(tc.token)
		switch {
		case tc.ok && (code != http.StatusOK || !strings.Contains(got, `"tell-joke"`)):
			t.Errorf("%s: %d %s; want the tools", tc.name, code, got)
		case !tc.ok && (code != http.StatusUnauthorized || !strings.Contains(got, metadata) || !strings.Contains(got, `error="invalid_token"`)):
			t.Errorf("%s: %d %s; want 401 with an invalid_token challenge", tc.name, code, got)
		}
	}

	// A Go SDK client with a token for the resource lists and calls.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "oauth-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: g.resource,
		HTTPClient: &http.Client{Transport: bearer(as.token(t, as.issuer, "svc", g.resource, time.Minute, as.key))}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"msg": "with a token"}})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("tools/call with a token: %+v, %v", res, err)
	}
	if txt, ok := res.Content[0].(*sdk.TextContent); !ok || txt.Text != "with a token" {
		t.Errorf("tools/call with a token: %+v", res.Content[0])
	}
}

// TestMCPOAuthPythonClient: the Python MCP SDK's OAuth client
// (client_credentials) finds the authorization server from the gateway's
// 401 and metadata, gets a token for the resource from it, and lists and
// calls tools with it, in both protocol eras (test/python/test_mcp_oauth.py).
func TestMCPOAuthPythonClient(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	venv := pythonVenv(t, root)
	as := newAuthServer(t)
	g := startOAuthGateway(t, as)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), "-m", "pytest", "-q", "-rfEs",
		"-p", "no:cacheprovider", "test/python/test_mcp_oauth.py")
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"TOOLGATE_MCP_OAUTH_URL="+g.resource,
		"TOOLGATE_MCP_OAUTH_ISSUER="+as.issuer,
		"TOOLGATE_MCP_OAUTH_CLIENT_ID="+as.client.id,
		"TOOLGATE_MCP_OAUTH_CLIENT_SECRET="+as.client.secret,
		"TOOLGATE_MCP_OAUTH_WRONG_AUDIENCE="+as.token(t, as.issuer, "svc", "https://other.example.com/mcp", 10*time.Minute, as.key),
		"TOOLGATE_MCP_OAUTH_TOKEN="+as.token(t, as.issuer, "svc", g.resource, 10*time.Minute, as.key),
		// conftest.py's gRPC fixtures are unused here but read these.
		"TOOLGATE_GRPC_ADDR="+env.gw.GRPCAddr(),
		"TOOLGATE_HTTP_BASE="+env.httpBase,
		"PYTHONDONTWRITEBYTECODE=1",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), out.String())
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
	if strings.Contains(out.String(), " skipped") || !strings.Contains(out.String(), " passed") {
		t.Fatal("pytest skipped tests or ran none; every OAuth client test must run")
	}
	// The client asked for tokens for this resource (RFC 8707), nothing else.
	as.mu.Lock()
	defer as.mu.Unlock()
	if len(as.resources) == 0 {
		t.Fatal("the Python client never asked the authorization server for a token")
	}
	for _, r := range as.resources {
		if r != g.resource {
			t.Errorf("token requested for resource %q, want %q", r, g.resource)
		}
	}
}
