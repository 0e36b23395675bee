package auth

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpctap "google.golang.org/grpc/tap"
)

// TestClientCert authenticates callers by the client certificate the
// server's TLS verified: the call carries the connection state of a real
// handshake, as every door that serves TLS hands it over.
func TestClientCert(t *testing.T) {
	t.Parallel()
	ca, otherCA := newPKI(t, "test CA"), newPKI(t, "other CA")
	serverCert := ca.issue(t, pkix.Name{CommonName: "gateway"}, x509.ExtKeyUsageServerAuth, []string{"gateway.test"})
	server := func(auth tls.ClientAuthType) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: auth, ClientCAs: ca.pool, MinVersion: tls.VersionTLS13}
	}
	verifying, requesting := server(tls.VerifyClientCertIfGiven), server(tls.RequestClientCert)
	client := func(certs ...tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: ca.pool, ServerName: "gateway.test", Certificates: certs, MinVersion: tls.VersionTLS13}
	}
	forced := func(cert tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: ca.pool, ServerName: "gateway.test", MinVersion: tls.VersionTLS13,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}
	}
	withCerts, err := New(WithClientCerts(), WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	keysOnly, err := New(WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	carol := ca.issue(t, pkix.Name{CommonName: "carol", OrganizationalUnit: []string{"ops", "admin"}}, x509.ExtKeyUsageClientAuth, nil)
	spiffe := ca.issue(t, pkix.Name{}, x509.ExtKeyUsageClientAuth, []string{"dave.internal"}, "spiffe://example.org/svc/dave")
	dnsOnly := ca.issue(t, pkix.Name{}, x509.ExtKeyUsageClientAuth, []string{"eve.internal"})
	nameless := ca.issue(t, pkix.Name{Organization: []string{"acme"}}, x509.ExtKeyUsageClientAuth, nil)
	stranger := otherCA.issue(t, pkix.Name{CommonName: "mallory"}, x509.ExtKeyUsageClientAuth, nil)

	tests := []struct {
		name   string
		a      *Authenticator
		server *tls.Config
		client *tls.Config // nil: the call did not come over TLS
		md     []string
		code   codes.Code
		want   string // the caller when OK, else a substring of the message
	}{
		{"CommonName and OUs", withCerts, verifying, client(carol), nil, codes.OK, "carol|mtls|ops,admin"},
		{"URI SAN without CommonName", withCerts, verifying, client(spiffe), nil, codes.OK, "spiffe://example.org/svc/dave|mtls|"},
		{"DNS SAN without CommonName or URI", withCerts, verifying, client(dnsOnly), nil, codes.OK, "eve.internal|mtls|"},
		{"a certificate that names no user", withCerts, verifying, client(nameless), nil, codes.Unauthenticated, "client certificate names no user"},
		{"no certificate", withCerts, verifying, client(), nil, codes.Unauthenticated, MsgMissingCredentials},
		{"no TLS", withCerts, nil, nil, nil, codes.Unauthenticated, MsgMissingCredentials},
		{"a bearer credential wins over the certificate", withCerts, verifying, client(carol), []string{"x-api-key", aliceKey}, codes.OK, "alice|api-key|admin"},
		{"a bad bearer credential is not rescued by the certificate", withCerts, verifying, client(carol), []string{"x-api-key", "nope"}, codes.Unauthenticated, "invalid API key"},
		// Go's TLS client only offers a certificate from a CA the server names.
		{"certificate from another CA is not offered", withCerts, verifying, client(stranger), nil, codes.Unauthenticated, MsgMissingCredentials},
		// A certificate the server asked for but did not verify is no identity.
		{"unverified certificate", withCerts, requesting, client(carol), nil, codes.Unauthenticated, MsgMissingCredentials},
		{"certificates not enabled", keysOnly, verifying, client(carol), nil, codes.Unauthenticated, MsgMissingCredentials},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCall(toolcall.OpInvoke, "tell-joke", tc.md...)
			if tc.client != nil {
				cs, err := handshake(t, tc.server, tc.client)
				if err != nil {
					t.Fatalf("handshake: %v", err)
				}
				if tc.server == requesting && (len(cs.PeerCertificates) == 0 || len(cs.VerifiedChains) != 0) {
					t.Fatalf("want a certificate the server did not verify: %d sent, %d chains verified", len(cs.PeerCertificates), len(cs.VerifiedChains))
				}
				c.TLS = cs
			}
			got, err := run(t.Context(), tc.a, c)
			if tc.code == codes.OK {
				checkStatus(t, err, codes.OK, "")
				if got != tc.want {
					t.Fatalf("caller %q, want %q", got, tc.want)
				}
				return
			}
			checkStatus(t, err, tc.code, tc.want)
			if got != "" {
				t.Fatalf("a refused call reached the handler as %q", got)
			}
		})
	}

	// A certificate from another CA, forced on a server that verifies,
	// fails the handshake: no call is ever made.
	if cs, err := handshake(t, verifying, forced(stranger)); err == nil {
		t.Fatalf("handshake with a stranger's certificate succeeded: %+v", cs.PeerCertificates)
	}
}

// TestTapRefusesReservedMetadata: the tap refuses reserved metadata, in
// any letter case, before a call starts, and lets other calls pass with
// their context.
func TestTapRefusesReservedMetadata(t *testing.T) {
	t.Parallel()
	a, err := New(WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	tap := a.TapHandle()
	for _, key := range []string{"x-toolgate-forwarded-identity", "X-Toolgate-User"} {
		_, err := tap(t.Context(), &grpctap.Info{FullMethodName: toolcall.MethodInvoke, Header: metadata.MD{key: {"carol"}, "x-api-key": {aliceKey}}})
		checkStatus(t, err, codes.Unauthenticated, "metadata "+key+" is reserved for the gateway")
	}
	ctx, err := tap(t.Context(), &grpctap.Info{FullMethodName: toolcall.MethodInvoke, Header: metadata.MD{"x-api-key": {aliceKey}}})
	if err != nil || ctx != t.Context() {
		t.Fatalf("tap on ordinary metadata: %v", err)
	}
}
