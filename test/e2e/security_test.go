package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// secured is a gateway with every way to authenticate, a policy, a rate
// limit and a small body limit, in front of the shared echo service.
type secured struct {
	http     *http.Client // trusts the gateway; presents no certificate
	certHTTP *http.Client // presents the client certificate of "carol"
	base     string
	grpcAddr string
	tlsConf  *tls.Config // for gRPC, no client certificate
	certTLS  *tls.Config // for gRPC, with carol's certificate
	secret   []byte
}

const (
	aliceKey   = "alice-test-key-0123456789"
	readerKey  = "reader-test-key-0123456789"
	limitedKey = "limited-test-key-0123456789"
)

func startSecured(t *testing.T) *secured {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, caKey := newCA(t)
	serverPEM, serverKeyPEM := newLeaf(t, ca, caKey, "toolgate", true)
	clientPEM, clientKeyPEM := newLeaf(t, ca, caKey, "carol", false)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})

	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	secret := []byte(hex.EncodeToString(raw)) // printable: the gateway trims the file's white space
	reg := write("registry.yaml", fmt.Sprintf(`tool-service:
  echo-service: {topic: %s}
tool:
  echo: {type: tool-service, service: echo-service}
  secret-echo: {type: tool-service, service: echo-service}
`, env.echoTopic))
	keys := write("keys.yaml", fmt.Sprintf(`keys:
  - {hash: %q, user: alice, roles: [user]}
  - {hash: %q, user: rita, roles: [reader]}
  - {hash: %q, user: lim, roles: [user]}
`, auth.HashKey(aliceKey), auth.HashKey(readerKey), auth.HashKey(limitedKey)))
	policy := write("policy.yaml", `rules:
  - {roles: [user], tools: ["echo"], actions: [list, invoke]}
  - {users: ["mtls:carol", "jwt(https://issuer.test):jwt-*"], tools: ["*"], actions: [list, invoke]}
  - {roles: [reader], tools: ["*"], actions: [list]}
`)
	gw := runGateway(t, nil, "--registry", reg,
		"--tls-cert", write("server.pem", string(serverPEM)), "--tls-key", write("server.key", string(serverKeyPEM)),
		"--client-ca", write("ca.pem", string(caPEM)),
		"--api-keys", keys, "--jwt-hs256-secret-file", write("jwt.secret", string(secret)),
		"--jwt-issuer", "https://issuer.test", "--jwt-audience", "toolgate",
		"--policy", policy, "--rate-limit", "0.5", "--rate-burst", "30", "--max-body-bytes", "4096")

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	clientPair, err := tls.X509KeyPair(clientPEM, clientKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	s := &secured{
		base:     "https://" + gw.HTTPAddr(),
		grpcAddr: gw.GRPCAddr(),
		tlsConf:  &tls.Config{RootCAs: pool, ServerName: "toolgate"},
		certTLS:  &tls.Config{RootCAs: pool, ServerName: "toolgate", Certificates: []tls.Certificate{clientPair}},
		secret:   secret,
	}
	s.http = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: s.tlsConf}}
	s.certHTTP = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: s.certTLS}}
	t.Cleanup(s.http.CloseIdleConnections)
	t.Cleanup(s.certHTTP.CloseIdleConnections)
	eventually.Succeeds(t, 30*time.Second, "secured gateway ready", func() error {
		resp, err := s.http.Get(s.base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d", resp.StatusCode)
		}
		return nil
	})
	return s
}

func (s *secured) token(t *testing.T, sub, aud string, exp time.Duration) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "iss": "https://issuer.test", "aud": aud, "exp": time.Now().Add(exp).Unix(), "iat": time.Now().Add(-time.Minute).Unix(),
	}).SignedString(s.secret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// restCall invokes a tool over HTTPS with the given headers and body.
func (s *secured) restCall(t *testing.T, client *http.Client, tool string, headers map[string]string, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.base+"/v1/tools/"+tool+":invoke", strings.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

func (s *secured) grpcCall(t *testing.T, tlsConf *tls.Config, tool string, md map[string]string) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()
	for k, v := range md {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	args, _ := structpb.NewStruct(map[string]any{"mode": "user"})
	r, err := toolgatev1.NewToolServiceClient(conn).InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: tool, Arguments: args})
	return r.GetOutput(), err
}

func TestAuthMatrix(t *testing.T) {
	s := startSecured(t)
	bearer := func(v string) map[string]string { return map[string]string{"authorization": "Bearer " + v} }
	cases := []struct {
		name     string
		headers  map[string]string
		withCert bool
		code     codes.Code
		user     string // the user the service sees
		restCode int    // when REST differs: the HTTP status
		restUser string
	}{
		{"no credential", nil, false, codes.Unauthenticated, "", 0, ""},
		{"bad key", bearer("not-a-key-of-ours"), false, codes.Unauthenticated, "", 0, ""},
		{"expired JWT", bearer(s.token(t, "jwt-dave", "toolgate", -time.Hour)), false, codes.Unauthenticated, "", 0, ""},
		{"wrong audience", bearer(s.token(t, "jwt-dave", "someone-else", time.Hour)), false, codes.Unauthenticated, "", 0, ""},
		{"valid key", bearer(aliceKey), false, codes.OK, "alice", 0, ""},
		{"valid key as x-api-key", map[string]string{"x-api-key": aliceKey}, false, codes.OK, "alice", 0, ""},
		{"valid JWT", bearer(s.token(t, "jwt-dave", "toolgate", time.Hour)), false, codes.OK, "jwt-dave", 0, ""},
		{"valid client certificate", nil, true, codes.OK, "carol", 0, ""},
		// gRPC rejects the internal header outright; REST never forwards it,
		// so the call goes on as alice.
		{"spoofed user header", map[string]string{"authorization": "Bearer " + aliceKey, "x-toolgate-user": "mallory"}, false, codes.Unauthenticated, "", 200, "alice"},
	}
	for _, c := range cases {
		t.Run(c.name+"/grpc", func(t *testing.T) {
			conf := s.tlsConf
			if c.withCert {
				conf = s.certTLS
			}
			got, err := s.grpcCall(t, conf, "echo", c.headers)
			if status.Code(err) != c.code || (c.code == codes.OK && got != c.user) {
				t.Fatalf("got %q %v, want %v and the service seeing %q", got, err, c.code, c.user)
			}
		})
		t.Run(c.name+"/rest", func(t *testing.T) {
			client := s.http
			if c.withCert {
				client = s.certHTTP
			}
			h := map[string]string{}
			for k, v := range c.headers {
				h[k] = v
			}
			code, _, body := s.restCall(t, client, "echo", h, `{"arguments": {"mode": "user"}}`)
			wantHTTP, wantUser := map[codes.Code]int{codes.OK: 200, codes.Unauthenticated: 401}[c.code], c.user
			if c.restCode != 0 {
				wantHTTP, wantUser = c.restCode, c.restUser
			}
			if code != wantHTTP || (wantHTTP == 200 && body["output"] != wantUser) {
				t.Fatalf("HTTP %d %v, want %d and the service seeing %q", code, body, wantHTTP, wantUser)
			}
		})
	}

	t.Run("a user in the body or metadata never reaches the envelope", func(t *testing.T) {
		code, _, body := s.restCall(t, s.http, "echo", map[string]string{"authorization": "Bearer " + aliceKey, "Grpc-Metadata-User": "mallory"},
			`{"arguments": {"mode": "user", "user": "mallory"}}`)
		if code != 200 || body["output"] != "alice" {
			t.Fatalf("HTTP %d %v, want the service to see alice", code, body)
		}
		code, _, body = s.restCall(t, s.http, "echo", bearer(aliceKey), `{"user": "mallory", "arguments": {"mode": "user"}}`)
		if code != 400 {
			t.Fatalf("a top-level user field: HTTP %d %v, want 400 (unknown field)", code, body)
		}
	})

	t.Run("forbidden tool is 403 and hidden from the list", func(t *testing.T) {
		code, _, body := s.restCall(t, s.http, "secret-echo", bearer(aliceKey), `{"arguments": {}}`)
		if code != http.StatusForbidden || body["code"] != float64(codes.PermissionDenied) {
			t.Fatalf("HTTP %d %v, want 403", code, body)
		}
		req, _ := http.NewRequest(http.MethodGet, s.base+"/v1/tools", nil)
		req.Header.Set("authorization", "Bearer "+aliceKey)
		resp, err := s.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&list)
		if resp.StatusCode != http.StatusOK || len(list.Tools) != 1 || list.Tools[0].Name != "echo" {
			t.Fatalf("alice's list: %d %+v, want only echo", resp.StatusCode, list.Tools)
		}
		// A reader may list but not invoke.
		if code, _, body := s.restCall(t, s.http, "echo", bearer(readerKey), `{"arguments": {}}`); code != http.StatusForbidden {
			t.Fatalf("reader invoking: HTTP %d %v, want 403", code, body)
		}
	})

	t.Run("body over the limit is 413", func(t *testing.T) {
		big := `{"arguments": {"msg": "` + strings.Repeat("x", 8192) + `"}}`
		code, _, body := s.restCall(t, s.http, "echo", bearer(aliceKey), big)
		if code != http.StatusRequestEntityTooLarge {
			t.Fatalf("HTTP %d %v, want 413", code, body)
		}
	})

	t.Run("rate limit is 429 with Retry-After", func(t *testing.T) {
		var last int
		var hdr http.Header
		for range 60 { // burst 30, one more every 2 s
			last, hdr, _ = s.restCall(t, s.http, "echo", bearer(limitedKey), `{"arguments": {"msg": "x"}}`)
			if last == http.StatusTooManyRequests {
				break
			}
		}
		if last != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
			t.Fatalf("last HTTP %d, Retry-After %q; want 429 with Retry-After", last, hdr.Get("Retry-After"))
		}
		// A stream refused before its first chunk says the same.
		req, _ := http.NewRequest(http.MethodPost, s.base+"/v1/tools/echo:stream", strings.NewReader(`{"arguments": {"msg": "x"}}`))
		for k, v := range bearer(limitedKey) {
			req.Header.Set(k, v)
		}
		resp, err := s.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("stream: HTTP %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		_, err = s.grpcCall(t, s.tlsConf, "echo", bearer(limitedKey))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("gRPC: %v, want RESOURCE_EXHAUSTED", err)
		}
	})
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return ca, key
}

func newLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"toolgate"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}
