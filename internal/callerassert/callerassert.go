// Package callerassert signs the caller assertion of every call
// (wire.PropCaller): a compact JWS whose claims (wire.CallerClaims) tell a
// tool service who the call comes from, for which service and tool, until
// when, and that a gateway of its deployment sent it. It also serves the
// public keys tool services check them with, as a JWK Set
// (wire.CallerJWKSPath).
//
// The key is an Ed25519 (EdDSA, preferred: the cheaper signature) or a
// P-256 (ES256) private key in a PEM PKCS#8 file. Rotation: the previous
// key (its private or public key, in PEM) stays in the JWK Set while
// services pick the new one up; only the current key signs. Keys are
// named (kid) by their JWK thumbprint (RFC 7638), the same on every
// replica holding the same key.
//
// The JWS is golang-jwt's (github.com/golang-jwt/jwt/v5) signing methods;
// the JWK Set is jwkset's (github.com/MicahParks/jwkset), the library the
// gateway's own JWT authentication reads JWK Sets with.
package callerassert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/toolgate/toolgate/wire"
)

// DefaultIssuer is the assertions' issuer (iss) when the deployment names
// none.
const DefaultIssuer = "toolgate"

// Signer signs caller assertions with the current key.
type Signer struct {
	issuer string
	key    crypto.Signer
	method jwt.SigningMethod
	kid    string
	// header is the JWS protected header, base64url-encoded, the same for
	// every assertion.
	header string
	jwks   []byte
}

// Load reads the current key from keyFile (PEM PKCS#8: an Ed25519 or
// P-256 private key) and, when previousFile is not "", the previous key
// (its private key, or its public key in PEM PKIX), whose assertions the
// services still accept while they move to the current one.
func Load(issuer, keyFile, previousFile string) (*Signer, error) {
	key, err := readPrivate(keyFile)
	if err != nil {
		return nil, err
	}
	var prev []crypto.PublicKey
	if previousFile != "" {
		p, err := readPublic(previousFile)
		if err != nil {
			return nil, err
		}
		prev = append(prev, p)
	}
	return New(issuer, key, prev...)
}

// New returns a signer with key (ed25519.PrivateKey or a P-256
// *ecdsa.PrivateKey) whose JWK Set also holds the previous keys'.
// issuer "" is DefaultIssuer.
func New(issuer string, key crypto.Signer, previous ...crypto.PublicKey) (*Signer, error) {
	if issuer == "" {
		issuer = DefaultIssuer
	}
	s := &Signer{issuer: issuer, key: key}
	cur, err := jwk(key.Public())
	if err != nil {
		return nil, err
	}
	s.kid = cur.KID
	s.method = jwt.GetSigningMethod(string(cur.ALG))
	keys := []jwkset.JWKMarshal{cur}
	for _, p := range previous {
		k, err := jwk(p)
		if err != nil {
			return nil, fmt.Errorf("previous key: %w", err)
		}
		if k.KID != cur.KID {
			keys = append(keys, k)
		}
	}
	h, err := json.Marshal(map[string]string{"alg": string(cur.ALG), "typ": wire.CallerAssertionType, "kid": s.kid})
	if err != nil {
		return nil, err
	}
	s.header = base64.RawURLEncoding.EncodeToString(h)
	if s.jwks, err = json.Marshal(jwkset.JWKSMarshal{Keys: keys}); err != nil {
		return nil, err
	}
	return s, nil
}

// Issuer is the assertions' issuer (iss).
func (s *Signer) Issuer() string { return s.issuer }

// KeyID is the current key's id (kid).
func (s *Signer) KeyID() string { return s.kid }

// Sign returns the assertion of c: its Issuer and IssuedAt are the
// signer's and now when not set.
func (s *Signer) Sign(c wire.CallerClaims) (string, error) {
	if c.Issuer == "" {
		c.Issuer = s.issuer
	}
	if c.IssuedAt == 0 {
		c.IssuedAt = time.Now().Unix()
	}
	claims, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	// header.claims.signature in one buffer: 86 characters of signature
	// for Ed25519 and P-256 alike.
	buf := make([]byte, 0, len(s.header)+1+enc.EncodedLen(len(claims))+1+86)
	buf = append(buf, s.header...)
	buf = append(buf, '.')
	buf = enc.AppendEncode(buf, claims)
	sig, err := s.method.Sign(string(buf), s.key)
	if err != nil {
		return "", fmt.Errorf("caller assertion: %w", err)
	}
	buf = append(buf, '.')
	buf = enc.AppendEncode(buf, sig)
	return string(buf), nil
}

// JWKS is the JWK Set of the current and previous keys' public keys.
func (s *Signer) JWKS() []byte { return s.jwks }

// Handler serves the JWK Set (GET wire.CallerJWKSPath).
func (s *Signer) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		// Services read it again on a key they do not know: a minute is
		// what a rotation waits at most for a cache in between.
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = w.Write(s.jwks)
	})
}

// jwk is pub as a JWK for signatures, its kid the RFC 7638 thumbprint.
func jwk(pub crypto.PublicKey) (jwkset.JWKMarshal, error) {
	var alg jwkset.ALG
	switch k := pub.(type) {
	case ed25519.PublicKey:
		alg = jwkset.AlgEdDSA
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return jwkset.JWKMarshal{}, fmt.Errorf("an ECDSA key must be on P-256 (ES256), not %s", k.Curve.Params().Name)
		}
		alg = jwkset.AlgES256
	default:
		return jwkset.JWKMarshal{}, fmt.Errorf("a %T key cannot sign caller assertions: use an Ed25519 key (openssl genpkey -algorithm ed25519) or a P-256 one", pub)
	}
	j, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{ALG: alg, USE: jwkset.UseSig}})
	if err != nil {
		return jwkset.JWKMarshal{}, err
	}
	m := j.Marshal()
	// RFC 7638: the required members, in lexical order, no white space.
	var thumb string
	if m.KTY == jwkset.KtyOKP {
		thumb = fmt.Sprintf(`{"crv":%q,"kty":%q,"x":%q}`, m.CRV, m.KTY, m.X)
	} else {
		thumb = fmt.Sprintf(`{"crv":%q,"kty":%q,"x":%q,"y":%q}`, m.CRV, m.KTY, m.X, m.Y)
	}
	sum := sha256.Sum256([]byte(thumb))
	m.KID = base64.RawURLEncoding.EncodeToString(sum[:])
	return m, nil
}

// readPrivate reads a PEM PKCS#8 private key that can sign assertions.
func readPrivate(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: want a PEM \"PRIVATE KEY\" (PKCS#8), e.g. from openssl genpkey -algorithm ed25519", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sk, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: a %T cannot sign", path, k)
	}
	if _, err := jwk(sk.Public()); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sk, nil
}

// readPublic reads a previous key: its private key (PKCS#8) or its public
// key (PKIX), in PEM.
func readPublic(path string) (crypto.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM block: want a \"PRIVATE KEY\" or \"PUBLIC KEY\"", path)
	}
	var pub crypto.PublicKey
	switch blk.Type {
	case "PRIVATE KEY":
		sk, err := readPrivate(path)
		if err != nil {
			return nil, err
		}
		pub = sk.Public()
	case "PUBLIC KEY":
		if pub, err = x509.ParsePKIXPublicKey(blk.Bytes); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	default:
		return nil, fmt.Errorf("%s: a PEM %q: want a \"PRIVATE KEY\" or \"PUBLIC KEY\"", path, blk.Type)
	}
	if _, err := jwk(pub); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pub, nil
}
