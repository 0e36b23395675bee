package toolservice

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/callerassert"
	"github.com/toolgate/toolgate/wire"
)

func newSigner(t testing.TB) (*callerassert.Signer, ed25519.PrivateKey) {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := callerassert.New("dep", k)
	if err != nil {
		t.Fatal(err)
	}
	return s, k
}

func writeJWKS(t testing.TB, path string, jwks []byte) {
	t.Helper()
	if err := os.WriteFile(path, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
}

func sign(t testing.TB, s *callerassert.Signer, c wire.CallerClaims) string {
	t.Helper()
	tok, err := s.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// claimsFor are good claims for request id to service "svc".
func claimsFor(id string) wire.CallerClaims {
	return wire.CallerClaims{Subject: "api-key:alice", Source: "api-key", Roles: []string{"dev"}, Audience: "svc", Tool: "joke",
		ID: id, Expires: time.Now().Add(time.Minute).Unix()}
}

// TestCallerCheck: an assertion signed with the gateway's key, for this
// service and this request, not expired and not seen before gives the
// caller; any other is refused, saying why.
func TestCallerCheck(t *testing.T) {
	dir := t.TempDir()
	s, _ := newSigner(t)
	other, _ := newSigner(t)
	jwks := filepath.Join(dir, "jwks.json")
	writeJWKS(t, jwks, s.JWKS())
	c, err := newCallerCheck(jwks, []string{"svc", "non-persistent://tg/request/svc"}, "")
	if err != nil {
		t.Fatal(err)
	}
	good := sign(t, s, claimsFor("r1"))
	who, err := c.check(good, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if who.Subject != "api-key:alice" || who.Source != "api-key" || who.Tool != "joke" || who.Issuer != "dep" || who.RequestID != "r1" ||
		len(who.Roles) != 1 || who.Roles[0] != "dev" || who.Expires.Before(time.Now()) {
		t.Errorf("caller %+v", who)
	}
	// The request topic is an audience too: a service the registry
	// names no id for.
	byTopic := claimsFor("r-topic")
	byTopic.Audience = "non-persistent://tg/request/svc"
	if _, err := c.check(sign(t, s, byTopic), "r-topic"); err != nil {
		t.Errorf("audience the request topic: %v", err)
	}

	expired := claimsFor("r2")
	expired.Expires = time.Now().Add(-time.Minute).Unix()
	otherAud := claimsFor("r3")
	otherAud.Audience = "another-service"
	noTool := claimsFor("r5")
	noTool.Tool = ""
	// Another subject, the same signature.
	parts := strings.Split(sign(t, s, claimsFor("r6")), ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), "alice", "mallory", 1))) + "." + parts[2]
	for _, tc := range []struct {
		name, assertion, id, want string
	}{
		{"missing", "", "r0", "carries no caller assertion"},
		{"replayed", good, "r1", "used before"},
		{"forged: another key", sign(t, other, claimsFor("r4")), "r4", "do not hold"},
		{"forged: tampered", tampered, "r6", "signature does not verify"},
		{"not a JWS", "hello", "r7", "not valid"},
		{"expired", sign(t, s, expired), "r2", "expired"},
		{"another service", sign(t, s, otherAud), "r3", "another service"},
		{"another request", sign(t, s, claimsFor("r8")), "r9", "another request"},
		{"no tool", sign(t, s, noTool), "r5", "no subject or no tool"},
	} {
		if _, err := c.check(tc.assertion, tc.id); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}

	// An issuer required: another's is refused.
	ci, err := newCallerCheck(jwks, []string{"svc"}, "other-deployment")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ci.check(sign(t, s, claimsFor("r10")), "r10"); err == nil {
		t.Error("an assertion of another issuer accepted")
	}
}

// TestCallerKeyRotation: a key the service does not know yet is read
// from the source again — not more than once per reloadAfter — and the
// previous key stays good while the set holds it.
func TestCallerKeyRotation(t *testing.T) {
	dir := t.TempDir()
	_, oldKey, _ := ed25519.GenerateKey(rand.Reader)
	_, newKey, _ := ed25519.GenerateKey(rand.Reader)
	old, _ := callerassert.New("dep", oldKey)
	rotated, err := callerassert.New("dep", newKey, oldKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	jwks := filepath.Join(dir, "jwks.json")
	writeJWKS(t, jwks, old.JWKS())
	c, err := newCallerCheck(jwks, []string{"svc"}, "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c.now = func() time.Time { return now }
	if _, err := c.check(sign(t, old, claimsFor("a")), "a"); err != nil {
		t.Fatal(err)
	}
	// The gateways move to the new key; the file is not updated yet, and
	// the keys were read just now: not read again.
	if _, err := c.check(sign(t, rotated, claimsFor("b")), "b"); err == nil {
		t.Fatal("a key the set does not hold accepted")
	}
	writeJWKS(t, jwks, rotated.JWKS())
	if _, err := c.check(sign(t, rotated, claimsFor("c")), "c"); err == nil {
		t.Fatal("the keys read again sooner than reloadAfter")
	}
	now = now.Add(c.reloadAfter + time.Second)
	if _, err := c.check(sign(t, rotated, claimsFor("d")), "d"); err != nil {
		t.Fatalf("the new key, once the set holds it: %v", err)
	}
	if _, err := c.check(sign(t, old, claimsFor("e")), "e"); err != nil {
		t.Fatalf("the previous key, still in the set: %v", err)
	}
	// The previous key withdrawn: refused once the keys are old enough
	// to be read again.
	newOnly, _ := callerassert.New("dep", newKey)
	writeJWKS(t, jwks, newOnly.JWKS())
	now = now.Add(c.maxAge + time.Second)
	if _, err := c.check(sign(t, old, claimsFor("f")), "f"); err == nil {
		t.Fatal("a key withdrawn from the set still accepted after maxAge")
	}
}

// TestCallerJWKSFromURL: the keys read from a URL, again on a key not
// known; a URL that cannot be read when the service starts does not stop
// it.
func TestCallerJWKSFromURL(t *testing.T) {
	s, _ := newSigner(t)
	var up atomic.Bool
	var reads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		if !up.Load() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(s.JWKS())
	}))
	defer srv.Close()
	c, err := newCallerCheck(srv.URL+wire.CallerJWKSPath, []string{"svc"}, "")
	if err != nil {
		t.Fatalf("a URL that cannot be read yet: %v", err)
	}
	if _, err := c.check(sign(t, s, claimsFor("a")), "a"); err == nil {
		t.Fatal("accepted without keys")
	}
	up.Store(true)
	now := time.Now().Add(c.reloadAfter + time.Second)
	c.now = func() time.Time { return now }
	if _, err := c.check(sign(t, s, claimsFor("b")), "b"); err != nil {
		t.Fatalf("once the URL answers: %v", err)
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads of the URL, want 2 (at New, none again within reloadAfter, then once)", n)
	}
}

// TestCallerOptions: the options' mistakes are New's errors.
func TestCallerOptions(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.json")
	empty := filepath.Join(dir, "empty.json")
	writeJWKS(t, empty, []byte(`{"keys":[]}`))
	cfg := Config{ID: "svc", Topic: "svc", PulsarURL: "pulsar://127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"empty source", []Option{WithCallerJWKS("")}, "empty source"},
		{"missing file", []Option{WithCallerJWKS(missing)}, "no such file"},
		{"no keys", []Option{WithCallerJWKS(empty)}, "no keys"},
		{"audience alone", []Option{WithCallerAudience("x")}, "need WithCallerJWKS"},
		{"issuer alone", []Option{WithCallerIssuer("x")}, "need WithCallerJWKS"},
	} {
		h := func(context.Context, *Request) (any, error) { return nil, nil }
		if _, err := New(cfg, h, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// BenchmarkCallerCheck is the CPU a call's assertion adds to it on the
// service.
func BenchmarkCallerCheck(b *testing.B) {
	s, _ := newSigner(b)
	jwks := filepath.Join(b.TempDir(), "jwks.json")
	writeJWKS(b, jwks, s.JWKS())
	c, err := newCallerCheck(jwks, []string{"svc"}, "")
	if err != nil {
		b.Fatal(err)
	}
	toks := make([]string, 1024)
	for i := range toks {
		toks[i] = sign(b, s, claimsFor(strconv.Itoa(i)))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n := i % len(toks)
		if n == 0 {
			c.seen.init() // the assertions fresh again
		}
		if _, err := c.check(toks[n], strconv.Itoa(n)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
