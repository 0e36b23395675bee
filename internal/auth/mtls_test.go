package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TestClientCertGRPC authenticates gRPC callers by the client certificate
// the server's TLS verified.
func TestClientCertGRPC(t *testing.T) {
	t.Parallel()
	ca, otherCA := newPKI(t, "test CA"), newPKI(t, "other CA")
	serverCert := ca.issue(t, pkix.Name{CommonName: "gateway"}, x509.ExtKeyUsageServerAuth, []string{"bufnet"})
	serverCreds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    ca.pool,
		MinVersion:   tls.VersionTLS13,
	})
	withCerts, err := New(WithClientCerts(), WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	keysOnly, err := New(WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	certsLis, keysLis := listen(t, withCerts, serverCreds), listen(t, keysOnly, serverCreds)
	client := func(certs ...tls.Certificate) grpc.DialOption {
		return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: ca.pool, ServerName: "bufnet", Certificates: certs, MinVersion: tls.VersionTLS13,
		}))
	}
	forced := func(cert tls.Certificate) grpc.DialOption {
		return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: ca.pool, ServerName: "bufnet", MinVersion: tls.VersionTLS13,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		}))
	}
	carol := ca.issue(t, pkix.Name{CommonName: "carol", OrganizationalUnit: []string{"ops", "admin"}}, x509.ExtKeyUsageClientAuth, nil)
	spiffe := ca.issue(t, pkix.Name{}, x509.ExtKeyUsageClientAuth, []string{"dave.internal"}, "spiffe://example.org/svc/dave")
	dnsOnly := ca.issue(t, pkix.Name{}, x509.ExtKeyUsageClientAuth, []string{"eve.internal"})
	stranger := otherCA.issue(t, pkix.Name{CommonName: "mallory"}, x509.ExtKeyUsageClientAuth, nil)

	tests := []struct {
		name string
		conn *grpc.ClientConn
		md   []string
		code codes.Code
		want string
	}{
		{"CommonName and OUs", dial(t, certsLis, client(carol)), nil, codes.OK, "carol|mtls|ops,admin|"},
		{"URI SAN without CommonName", dial(t, certsLis, client(spiffe)), nil, codes.OK, "spiffe://example.org/svc/dave|mtls||"},
		{"DNS SAN without CommonName or URI", dial(t, certsLis, client(dnsOnly)), nil, codes.OK, "eve.internal|mtls||"},
		{"no certificate", dial(t, certsLis, client()), nil, codes.Unauthenticated, ""},
		{"a bearer credential wins over the certificate", dial(t, certsLis, client(carol)), []string{"x-api-key", aliceKey}, codes.OK, "alice|api-key|admin|"},
		{"a bad bearer credential is not rescued by the certificate", dial(t, certsLis, client(carol)), []string{"x-api-key", "nope"}, codes.Unauthenticated, ""},
		// Go's TLS client only offers a certificate from a CA the server names.
		{"certificate from another CA is not offered", dial(t, certsLis, client(stranger)), nil, codes.Unauthenticated, MsgMissingCredentials},
		{"certificate from another CA, forced, fails the handshake", dial(t, certsLis, forced(stranger)), nil, codes.Unavailable, ""},
		{"certificates not enabled", dial(t, keysLis, client(carol)), nil, codes.Unauthenticated, MsgMissingCredentials},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := call(t.Context(), tc.conn, "tell-joke", tc.md...)
			checkStatus(t, err, tc.code, "")
			if tc.code == codes.OK && got != tc.want {
				t.Fatalf("caller %q, want %q", got, tc.want)
			}
			if tc.code != codes.OK && tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// restGateway serves grpc-gateway over HTTPS, as the gateway's REST side
// does, in front of a gRPC server with a's interceptors, and returns an
// HTTP client factory for callers with the given certificates.
func restGateway(t *testing.T, a *Authenticator, f *Forwarder, ca *pki, muxOpts ...runtime.ServeMuxOption) (url string, client func(...tls.Certificate) *http.Client) {
	t.Helper()
	lis := listen(t, a, nil)
	conn := dial(t, lis, grpc.WithTransportCredentials(insecure.NewCredentials()), f.DialOption())
	gw := runtime.NewServeMux(append([]runtime.ServeMuxOption{runtime.WithIncomingHeaderMatcher(HeaderMatcher)}, muxOpts...)...)
	if err := toolgatev1.RegisterToolServiceHandler(t.Context(), gw, conn); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f.Middleware(gw))
	srv.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.pool, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, func(certs ...tls.Certificate) *http.Client {
		c := srv.Client()
		tr := c.Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.Certificates = certs
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
}

// TestClientCertREST carries an HTTPS caller's verified client
// certificate through grpc-gateway to the gRPC interceptors, and checks
// that no header can forge one.
func TestClientCertREST(t *testing.T) {
	t.Parallel()
	ca := newPKI(t, "test CA")
	f, err := NewForwarder()
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(WithForwarder(f), WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	url, client := restGateway(t, a, f, ca)
	// A careless mux that forwards every Grpc-Metadata-* header: the gRPC
	// side must still refuse forged markers.
	legacyURL, legacyClient := restGateway(t, a, f, ca, runtime.WithLegacyHeaderMatching())

	carol := ca.issue(t, pkix.Name{CommonName: "carol", OrganizationalUnit: []string{"ops"}}, x509.ExtKeyUsageClientAuth, nil)
	signed, err := f.sign(Identity{User: "alice", Roles: []string{"admin"}}, toolgatev1.ToolService_InvokeTool_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		url     string
		client  *http.Client
		headers map[string]string
		code    int
		want    string
	}{
		{"client certificate", url, client(carol), nil, http.StatusOK, "carol|mtls|ops|"},
		{"no certificate, no credential", url, client(), nil, http.StatusUnauthorized, ""},
		{"X-Api-Key", url, client(), map[string]string{"X-Api-Key": aliceKey}, http.StatusOK, "alice|api-key|admin|"},
		{"Authorization", url, client(), map[string]string{"Authorization": "Bearer " + bobKey}, http.StatusOK, "svc-bob|api-key|reader|"},
		{"bearer wins over certificate", url, client(carol), map[string]string{"X-Api-Key": aliceKey}, http.StatusOK, "alice|api-key|admin|"},
		{"spoofed user header", url, client(), map[string]string{"X-Toolgate-User": "alice"}, http.StatusUnauthorized, ""},
		{"spoofed metadata header", url, client(), map[string]string{"Grpc-Metadata-X-Toolgate-User": "alice"}, http.StatusUnauthorized, ""},
		{"replayed marker in a header is dropped", url, client(), map[string]string{"X-Toolgate-Forwarded-Identity": signed}, http.StatusUnauthorized, ""},
		{"replayed marker in a metadata header is dropped", url, client(), map[string]string{"Grpc-Metadata-X-Toolgate-Forwarded-Identity": signed}, http.StatusUnauthorized, ""},
		{"certificate plus a spoof header keeps the certificate", url, client(carol), map[string]string{"Grpc-Metadata-X-Toolgate-Forwarded-Identity": signed}, http.StatusOK, "carol|mtls|ops|"},
		{"legacy matcher: forged marker refused", legacyURL, legacyClient(), map[string]string{"Grpc-Metadata-X-Toolgate-Forwarded-Identity": "forged"}, http.StatusUnauthorized, ""},
		{"legacy matcher: forged user refused", legacyURL, legacyClient(), map[string]string{"Grpc-Metadata-X-Toolgate-User": "alice", "X-Api-Key": bobKey}, http.StatusUnauthorized, ""},
		{"legacy matcher: marker beside the certificate's is refused", legacyURL, legacyClient(carol), map[string]string{"Grpc-Metadata-X-Toolgate-Forwarded-Identity": signed}, http.StatusUnauthorized, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, tc.url+"/v1/tools/tell-joke:invoke", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code {
				t.Fatalf("HTTP %d %s, want %d", resp.StatusCode, body, tc.code)
			}
			if tc.code != http.StatusOK {
				return
			}
			var out struct{ Output string }
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatal(err)
			}
			if out.Output != tc.want {
				t.Fatalf("caller %q, want %q", out.Output, tc.want)
			}
		})
	}
}

// TestForwardedIdentityGRPC sends forwarded-identity markers straight to
// the gRPC server, as an attacker who can reach it might.
func TestForwardedIdentityGRPC(t *testing.T) {
	t.Parallel()
	f, err := NewForwarder()
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewForwarder()
	if err != nil {
		t.Fatal(err)
	}
	stale := &Forwarder{key: f.key, now: func() time.Time { return time.Now().Add(-2 * forwardTTL) }}
	withFwd, err := New(WithForwarder(f), WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	withoutFwd, err := New(WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	conn, connNoFwd := serve(t, withFwd), serve(t, withoutFwd)
	carol := Identity{User: "carol", Roles: []string{"ops"}}
	tok := func(f *Forwarder, method string) string {
		s, err := f.sign(carol, method)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	invoke := toolgatev1.ToolService_InvokeTool_FullMethodName
	tests := []struct {
		name string
		conn *grpc.ClientConn
		md   []string
		code codes.Code
		want string
	}{
		{"signed in process for this method", conn, []string{forwardedKey, tok(f, invoke)}, codes.OK, "carol|mtls|ops|"},
		{"signed by another process", conn, []string{forwardedKey, tok(other, invoke)}, codes.Unauthenticated, ""},
		{"signed for another method", conn, []string{forwardedKey, tok(f, toolgatev1.ToolService_GetTool_FullMethodName)}, codes.Unauthenticated, ""},
		{"expired", conn, []string{forwardedKey, tok(stale, invoke)}, codes.Unauthenticated, ""},
		{"garbage", conn, []string{forwardedKey, "carol"}, codes.Unauthenticated, ""},
		{"two markers", conn, []string{forwardedKey, tok(f, invoke), forwardedKey, tok(f, invoke)}, codes.Unauthenticated, ""},
		{"forged marker with a valid key", conn, []string{forwardedKey, "forged", "x-api-key", aliceKey}, codes.Unauthenticated, ""},
		{"no forwarder trusted", connNoFwd, []string{forwardedKey, tok(f, invoke)}, codes.Unauthenticated, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := call(t.Context(), tc.conn, "tell-joke", tc.md...)
			checkStatus(t, err, tc.code, "")
			if got != tc.want {
				t.Fatalf("caller %q, want %q", got, tc.want)
			}
		})
	}
}

// TestForwarderCredentials checks the per-RPC credentials alone: nothing
// is added for calls the middleware did not authenticate.
func TestForwarderCredentials(t *testing.T) {
	t.Parallel()
	f, err := NewForwarder()
	if err != nil {
		t.Fatal(err)
	}
	creds := forwardCreds{f}
	ctx := credentials.NewContextWithRequestInfo(context.Background(), credentials.RequestInfo{Method: "/a/B"})
	md, err := creds.GetRequestMetadata(ctx)
	if err != nil || len(md) != 0 {
		t.Fatalf("without an identity: %v, %v; want nothing", md, err)
	}
	md, err = creds.GetRequestMetadata(context.WithValue(ctx, forwardCtxKey{}, Identity{User: "u", Method: MethodMTLS}))
	if err != nil {
		t.Fatal(err)
	}
	id, err := f.verify(md[forwardedKey], "/a/B")
	if err != nil || id.User != "u" || id.Method != MethodMTLS {
		t.Fatalf("round trip: %+v, %v", id, err)
	}
	if creds.RequireTransportSecurity() {
		t.Fatal("the gateway's own connection has no TLS")
	}
}
