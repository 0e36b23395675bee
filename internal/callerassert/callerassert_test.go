package callerassert_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/toolgate/toolgate/internal/callerassert"
	"github.com/toolgate/toolgate/wire"
)

// writeKey writes k as PEM PKCS#8 (a private key) or PKIX (a public one)
// into a file of dir, mode 0600.
func writeKey(t testing.TB, dir, name string, k any) string {
	t.Helper()
	var blk *pem.Block
	if pub, ok := k.(crypto.PublicKey); ok && !isPrivate(k) {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		blk = &pem.Block{Type: "PUBLIC KEY", Bytes: der}
	} else {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		blk = &pem.Block{Type: "PRIVATE KEY", Bytes: der}
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func isPrivate(k any) bool {
	switch k.(type) {
	case ed25519.PrivateKey, *ecdsa.PrivateKey, *rsa.PrivateKey:
		return true
	}
	return false
}

// parse verifies an assertion against the signer's JWK Set, as a
// service does.
func parse(t *testing.T, s *callerassert.Signer, tok string) (*jwt.Token, wire.CallerClaims) {
	t.Helper()
	kf, err := keyfunc.NewJWKSetJSON(s.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := jwt.Parse(tok, kf.Keyfunc, jwt.WithValidMethods([]string{"EdDSA", "ES256"}))
	if err != nil {
		t.Fatalf("the assertion does not verify against the JWK Set: %v", err)
	}
	var c wire.CallerClaims
	payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	return parsed, c
}

// TestSign: both kinds of key sign assertions that verify against the JWK
// Set the signer serves, with the claims given, the issuer and the time
// of issue filled in, and a header naming the key and the token's type.
func TestSign(t *testing.T) {
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		key  any
		alg  string
	}{{"ed25519", edKey, "EdDSA"}, {"p256", ecKey, "ES256"}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := callerassert.Load("", writeKey(t, dir, tc.name+".pem", tc.key), "")
			if err != nil {
				t.Fatal(err)
			}
			in := wire.CallerClaims{Subject: "api-key:alice", Source: "api-key", Roles: []string{"dev"}, Audience: "joke-service",
				Tool: "joke", ToolSet: "fun", ID: "0123abcd", Expires: time.Now().Add(time.Minute).Unix()}
			tok, err := s.Sign(in)
			if err != nil {
				t.Fatal(err)
			}
			parsed, got := parse(t, s, tok)
			if parsed.Header["alg"] != tc.alg || parsed.Header["kid"] != s.KeyID() || parsed.Header["typ"] != wire.CallerAssertionType {
				t.Errorf("header %v: want alg %s, kid %s, typ %s", parsed.Header, tc.alg, s.KeyID(), wire.CallerAssertionType)
			}
			if got.Issuer != callerassert.DefaultIssuer || got.IssuedAt < time.Now().Add(-time.Minute).Unix() || got.IssuedAt > time.Now().Unix() {
				t.Errorf("iss %q, iat %d: want %q and now", got.Issuer, got.IssuedAt, callerassert.DefaultIssuer)
			}
			got.Issuer, got.IssuedAt = "", 0
			if g, w := mustJSON(t, got), mustJSON(t, in); g != w {
				t.Errorf("claims %s, want %s", g, w)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestKeyIDIsThumbprint: a key is named by its RFC 7638 thumbprint — the
// Ed25519 key of RFC 8037's example has the thumbprint given there — so
// replicas with the same key name it alike.
func TestKeyIDIsThumbprint(t *testing.T) {
	// RFC 8037, appendix A.1 and A.3.
	d, _ := base64.RawURLEncoding.DecodeString("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A")
	s, err := callerassert.New("", ed25519.NewKeyFromSeed(d))
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyID() != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" {
		t.Errorf("kid %q, want RFC 8037's thumbprint", s.KeyID())
	}
}

// TestRotation: the JWK Set holds the current key and the previous one,
// given as its private or its public key; only the current one signs.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	_, oldKey, _ := ed25519.GenerateKey(rand.Reader)
	_, newKey, _ := ed25519.GenerateKey(rand.Reader)
	old, err := callerassert.New("dep", oldKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, prev := range []any{oldKey, oldKey.Public()} {
		s, err := callerassert.Load("dep", writeKey(t, dir, "new.pem", newKey), writeKey(t, dir, "old.pem", prev))
		if err != nil {
			t.Fatal(err)
		}
		var set struct {
			Keys []struct {
				KID string `json:"kid"`
				Use string `json:"use"`
				D   string `json:"d"`
			} `json:"keys"`
		}
		if err := json.Unmarshal(s.JWKS(), &set); err != nil {
			t.Fatal(err)
		}
		if len(set.Keys) != 2 || set.Keys[0].KID != s.KeyID() || set.Keys[1].KID != old.KeyID() || set.Keys[0].Use != "sig" {
			t.Fatalf("JWK Set %s: want the new key %s, then the old %s", s.JWKS(), s.KeyID(), old.KeyID())
		}
		for _, k := range set.Keys {
			if k.D != "" {
				t.Fatalf("the JWK Set holds a private key: %s", s.JWKS())
			}
		}
		tok, err := s.Sign(wire.CallerClaims{ID: "x", Expires: time.Now().Add(time.Minute).Unix()})
		if err != nil {
			t.Fatal(err)
		}
		if parsed, _ := parse(t, s, tok); parsed.Header["kid"] != s.KeyID() {
			t.Errorf("signed with %v, want the current key %s", parsed.Header["kid"], s.KeyID())
		}
	}
}

// TestBadKeys: what cannot sign assertions is refused with a reason.
func TestBadKeys(t *testing.T) {
	dir := t.TempDir()
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	good := writeKey(t, dir, "good.pem", ed)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, key, prev, want string }{
		{"rsa", writeKey(t, dir, "rsa.pem", rsaKey), "", "Ed25519"},
		{"p384", writeKey(t, dir, "p384.pem", p384), "", "P-256"},
		{"not pem", notPEM, "", "PRIVATE KEY"},
		{"public key as the current", writeKey(t, dir, "pub.pem", ed.Public()), "", "PRIVATE KEY"},
		{"missing", filepath.Join(dir, "none.pem"), "", "no such file"},
		{"previous rsa", good, writeKey(t, dir, "rsa2.pem", rsaKey), "Ed25519"},
		{"previous not pem", good, notPEM, "PEM"},
	} {
		if _, err := callerassert.Load("", tc.key, tc.prev); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// TestHandler serves the JWK Set.
func TestHandler(t *testing.T) {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	s, err := callerassert.New("", k)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, wire.CallerJWKSPath, nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/jwk-set+json" || rec.Body.String() != string(s.JWKS()) {
		t.Errorf("%d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}

// BenchmarkSign is the CPU a call's assertion adds to it on the gateway.
func BenchmarkSign(b *testing.B) {
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, bc := range []struct {
		name string
		key  crypto.Signer
	}{{"EdDSA", edKey}, {"ES256", ecKey}} {
		s, err := callerassert.New("toolgate", bc.key)
		if err != nil {
			b.Fatal(err)
		}
		c := wire.CallerClaims{Subject: "api-key:alice", Source: "api-key", Roles: []string{"dev", "ops"}, Audience: "joke-service",
			Tool: "joke", ID: "6f1c0e8a9b2d4c3e8f7a6b5c4d3e2f10", Expires: time.Now().Add(30 * time.Second).Unix()}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Sign(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
