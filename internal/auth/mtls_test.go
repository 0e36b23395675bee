package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpctap "google.golang.org/grpc/tap"
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
		{"CommonName and OUs", dial(t, certsLis, client(carol)), nil, codes.OK, "carol|mtls|ops,admin"},
		{"URI SAN without CommonName", dial(t, certsLis, client(spiffe)), nil, codes.OK, "spiffe://example.org/svc/dave|mtls|"},
		{"DNS SAN without CommonName or URI", dial(t, certsLis, client(dnsOnly)), nil, codes.OK, "eve.internal|mtls|"},
		{"no certificate", dial(t, certsLis, client()), nil, codes.Unauthenticated, ""},
		{"a bearer credential wins over the certificate", dial(t, certsLis, client(carol)), []string{"x-api-key", aliceKey}, codes.OK, "alice|api-key|admin"},
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

// TestClientCertInProcess authenticates a call the HTTP side serves in
// process: its context carries the HTTPS connection as the call's peer,
// so the same certificate check applies as on gRPC.
func TestClientCertInProcess(t *testing.T) {
	t.Parallel()
	ca := newPKI(t, "test CA")
	carol := ca.issue(t, pkix.Name{CommonName: "carol", OrganizationalUnit: []string{"ops"}}, x509.ExtKeyUsageClientAuth, nil)
	leaf, err := x509.ParseCertificate(carol.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	withCerts, err := New(WithClientCerts(), WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	keysOnly, err := New(WithAPIKeys(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	verified := &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}}}
	unverified := &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}}}
	tests := []struct {
		name string
		a    *Authenticator
		p    *peer.Peer
		md   []string
		code codes.Code
		want string
	}{
		{"verified certificate", withCerts, verified, nil, codes.OK, "carol|mtls|ops"},
		{"unverified certificate", withCerts, unverified, nil, codes.Unauthenticated, ""},
		{"no peer", withCerts, nil, nil, codes.Unauthenticated, ""},
		{"bearer wins over the certificate", withCerts, verified, []string{"x-api-key", aliceKey}, codes.OK, "alice|api-key|admin"},
		{"certificates not enabled", keysOnly, verified, nil, codes.Unauthenticated, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(tc.md...))
			if tc.p != nil {
				ctx = peer.NewContext(ctx, tc.p)
			}
			info := &grpc.UnaryServerInfo{FullMethod: toolgatev1.ToolService_InvokeTool_FullMethodName}
			out, err := tc.a.UnaryInterceptor()(ctx, &toolgatev1.InvokeToolRequest{Name: "tell-joke"}, info,
				func(ctx context.Context, _ any) (any, error) { return describe(ctx), nil })
			checkStatus(t, err, tc.code, "")
			if tc.code == codes.OK && out != tc.want {
				t.Fatalf("caller %q, want %q", out, tc.want)
			}
		})
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
		_, err := tap(t.Context(), &grpctap.Info{FullMethodName: toolgatev1.ToolService_InvokeTool_FullMethodName, Header: metadata.MD{key: {"carol"}, "x-api-key": {aliceKey}}})
		checkStatus(t, err, codes.Unauthenticated, "reserved")
	}
	ctx, err := tap(t.Context(), &grpctap.Info{FullMethodName: toolgatev1.ToolService_InvokeTool_FullMethodName, Header: metadata.MD{"x-api-key": {aliceKey}}})
	if err != nil || ctx != t.Context() {
		t.Fatalf("tap on ordinary metadata: %v", err)
	}
}
