package limits

import (
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
	"net/http"
	"testing"
	"time"
)

// testCert is a certificate signed by ca (self-signed when ca is nil).
func testCert(t *testing.T, cn string, ca *tls.Certificate, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: ca == nil, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	switch {
	case ca == nil:
		tmpl.ExtKeyUsage = nil
	case server:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	parent, signer := tmpl, any(key)
	if ca != nil {
		parent, signer = ca.Leaf, ca.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// TestTLSListenerState: requests over TLSListener's connections see the
// client's certificate in r.TLS, on HTTP/1.1 and on HTTP/2.
func TestTLSListenerState(t *testing.T) {
	ca := testCert(t, "test CA", nil, false)
	srvCert, cliCert := testCert(t, "server", &ca, true), testCert(t, "carol", &ca, false)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMeter(HTTP2{}, nil, false)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{ConnContext: ConnContext, Protocols: &p, Handler: TLSState(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			fmt.Fprintf(w, "%s no certificate", r.Proto)
			return
		}
		fmt.Fprintf(w, "%s %s", r.Proto, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))}
	go func() {
		_ = srv.Serve(m.TLSListener(lis, &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}))
	}()
	t.Cleanup(func() { _ = srv.Close() })
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cliCert}}, ForceAttemptHTTP2: h2}
		resp, err := (&http.Client{Transport: tr}).Get("https://" + lis.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		want := map[bool]string{false: "HTTP/1.1 carol", true: "HTTP/2.0 carol"}[h2]
		if string(b) != want {
			t.Errorf("got %q, want %q", b, want)
		}
	}
}
