package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testKeys are generated once per test binary; nothing secret is
// committed.
type testKeys struct {
	secret   []byte
	rsa      *rsa.PrivateKey
	ec       *ecdsa.PrivateKey
	rsaOther *rsa.PrivateKey
	jwks     []byte
}

var keysOnce = sync.OnceValues(func() (*testKeys, error) {
	k := &testKeys{secret: make([]byte, 32)}
	if _, err := rand.Read(k.secret); err != nil {
		return nil, err
	}
	var err error
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		return nil, err
	}
	if k.rsaOther, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		return nil, err
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	k.jwks, err = jwksJSON(k.rsa, k.ec)
	return k, err
})

func keys(t *testing.T) *testKeys {
	t.Helper()
	k, err := keysOnce()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// jwksJSON writes a JWK Set (RFC 7517/7518) by hand, so the test does not
// trust the library that reads it to have written it.
func jwksJSON(r *rsa.PrivateKey, e *ecdsa.PrivateKey) ([]byte, error) {
	b64 := base64.RawURLEncoding.EncodeToString
	ecdhPub, err := e.PublicKey.ECDH()
	if err != nil {
		return nil, err
	}
	raw := ecdhPub.Bytes() // 0x04 || X || Y
	return json.Marshal(map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "rsa-1", "alg": "RS256", "use": "sig", "n": b64(r.N.Bytes()), "e": b64(big.NewInt(int64(r.E)).Bytes())},
		{"kty": "EC", "kid": "ec-1", "alg": "ES256", "use": "sig", "crv": "P-256", "x": b64(raw[1:33]), "y": b64(raw[33:])},
	}})
}

const (
	testIssuer   = "https://issuer.test"
	testAudience = "toolgate"
)

// claims returns valid claims for user, changed by edits.
func claims(user string, edits ...func(jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{
		"sub":   user,
		"iss":   testIssuer,
		"aud":   testAudience,
		"iat":   now.Unix(),
		"exp":   now.Add(time.Hour).Unix(),
		"roles": []string{"reader"},
	}
	for _, e := range edits {
		e(c)
	}
	return c
}

func sign(t *testing.T, m jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
