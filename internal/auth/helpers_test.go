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
	"io"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/metadata"
	grpctap "google.golang.org/grpc/tap"
)

// describe names the caller a call reached the next handler with:
// "user|method|role,role", or "none" when it was not authenticated.
func describe(c *toolcall.Call) string {
	if !c.Authenticated {
		return "none"
	}
	return fmt.Sprintf("%s|%s|%s", c.Caller.User, c.Caller.Method, strings.Join(c.Caller.Roles, ","))
}

// echo is the handler behind the middleware under test: it answers every
// call with a description of its caller, a stream as one chunk.
func echo(_ context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
	if c.Op == toolcall.OpStream {
		return toolcall.Result{}, emit(toolcall.Chunk{Text: describe(c), Last: true})
	}
	return toolcall.Result{Output: describe(c)}, nil
}

// mdHeader is gRPC metadata as a call's Header, read as the gRPC door
// reads it (lower-case keys).
type mdHeader metadata.MD

func (h mdHeader) Values(key string) []string { return metadata.MD(h).Get(key) }

// newCall is a call of op on name with metadata pairs, as the gRPC door
// hands it over.
func newCall(op toolcall.Op, name string, md ...string) *toolcall.Call {
	return &toolcall.Call{Op: op, Name: name, Header: mdHeader(metadata.Pairs(md...))}
}

// run runs c through a's middleware in front of echo and returns the
// caller echo saw: the output, or a stream's chunks joined.
func run(ctx context.Context, a *Authenticator, c *toolcall.Call) (string, error) {
	var chunks []string
	var emit toolcall.Emit
	if c.Op == toolcall.OpStream {
		emit = func(ch toolcall.Chunk) error { chunks = append(chunks, ch.Text); return nil }
	}
	res, err := toolcall.Chain(echo, a.Middleware())(ctx, c, emit)
	if c.Op == toolcall.OpStream {
		return strings.Join(chunks, ""), err
	}
	return res.Output, err
}

// grpcRun drives a call as the gRPC server does: its tap first, over the
// transport's metadata, then the middleware over the call.
func grpcRun(ctx context.Context, a *Authenticator, c *toolcall.Call) (string, error) {
	md := metadata.MD(c.Header.(mdHeader))
	if _, err := a.TapHandle()(ctx, &grpctap.Info{FullMethodName: c.MethodName(), Header: md}); err != nil {
		return "", err
	}
	return run(ctx, a, c)
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

// handshake runs a real TLS handshake between client and server over an
// in-memory connection and returns the server side's connection state:
// what a door puts in toolcall.Call.TLS. The error is the server's when
// its handshake fails.
func handshake(t *testing.T, server, client *tls.Config) (*tls.ConnectionState, error) {
	t.Helper()
	sc, cc := net.Pipe()
	srv, cli := tls.Server(sc, server), tls.Client(cc, client)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cli.Close()
		if cli.HandshakeContext(t.Context()) != nil {
			return
		}
		// Read until the server closes, taking its alert or close_notify
		// (net.Pipe has no buffer: an unread write would block it).
		_, _ = io.Copy(io.Discard, cli)
	}()
	err := srv.HandshakeContext(t.Context())
	var cs tls.ConnectionState
	if err == nil {
		cs = srv.ConnectionState()
	}
	_ = srv.Close()
	<-done
	if err != nil {
		return nil, err
	}
	return &cs, nil
}
