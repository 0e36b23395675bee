package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/grpctest"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// echoServer answers every call with a description of the caller:
// "user|method|role,role|hook".
type echoServer struct {
	toolgatev1.UnimplementedToolServiceServer
}

func describe(ctx context.Context) string {
	id, ok := FromContext(ctx)
	if !ok {
		return "none"
	}
	return fmt.Sprintf("%s|%s|%s", id.User, id.Method, strings.Join(id.Roles, ","))
}

func (echoServer) InvokeTool(ctx context.Context, _ *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	return &toolgatev1.InvokeToolResponse{Output: describe(ctx)}, nil
}

func (echoServer) StreamTool(_ *toolgatev1.StreamToolRequest, s toolgatev1.ToolService_StreamToolServer) error {
	return s.Send(&toolgatev1.StreamToolResponse{Output: describe(s.Context()), Last: true})
}

func (echoServer) ListTools(context.Context, *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	return &toolgatev1.ListToolsResponse{}, nil
}

func (echoServer) GetTool(ctx context.Context, req *toolgatev1.GetToolRequest) (*toolgatev1.GetToolResponse, error) {
	return &toolgatev1.GetToolResponse{Tool: &toolgatev1.Tool{Name: req.GetName(), Description: describe(ctx)}}, nil
}

// serve runs a real gRPC server with a's interceptors (see listen) and
// returns a connection to it, without TLS.
func serve(t *testing.T, a *Authenticator) *grpc.ClientConn {
	t.Helper()
	return dial(t, listen(t, a, nil), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// listen runs a real gRPC server with a's tap and interceptors, the echo service
// and the health service on an in-memory listener; serverCreds, when set,
// puts TLS on it.
func listen(t *testing.T, a *Authenticator, serverCreds credentials.TransportCredentials) *bufconn.Listener {
	t.Helper()
	opts := []grpc.ServerOption{
		grpc.InTapHandle(a.TapHandle()),
		grpc.ChainUnaryInterceptor(a.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamInterceptor()),
	}
	if serverCreds != nil {
		opts = append(opts, grpc.Creds(serverCreds))
	}
	return grpctest.Listen(t, echoServer{}, opts...)
}

// dial connects to lis; opts must include transport credentials.
func dial(t *testing.T, lis *bufconn.Listener, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	return grpctest.Dial(t, lis, opts...)
}

// pki is a test certificate authority.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &pki{cert: cert, key: key, pool: pool}
}

var serial = big.NewInt(100)

// issue signs a leaf certificate for subject (and optional SANs).
func (p *pki) issue(t *testing.T, subject pkix.Name, usage x509.ExtKeyUsage, dns []string, uris ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn.Add(sn, serial),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
