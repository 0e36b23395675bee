package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// JWTConfig configures JWT bearer-token verification. At least one of
// HS256Secret and JWKS is required.
type JWTConfig struct {
	// HS256Secret verifies HS256 tokens; at least 32 bytes.
	HS256Secret []byte
	// JWKS is a JSON Web Key Set document (RFC 7517) whose public keys
	// verify RS256/384/512, PS256/384/512, ES256/384/512 and EdDSA
	// tokens. Read it with os.ReadFile; nothing is fetched over a network.
	JWKS []byte
	// Issuer, when set, must equal the token's iss.
	Issuer string
	// Audience, when set, must be among the token's aud.
	Audience string
	// UserClaim names the claim holding the user (default
	// DefaultUserClaim).
	UserClaim string
	// RolesClaim optionally names the claim holding the roles: an array
	// of strings or a space-separated string. Dots reach into objects
	// ("realm_access.roles").
	RolesClaim string
	// Leeway tolerates clock skew in exp, nbf and iat (default 30 s).
	Leeway time.Duration
}

// DefaultUserClaim is the JWT claim that names the user unless
// JWTConfig.UserClaim names another.
const DefaultUserClaim = "sub"

// JWTVerifier checks JWT bearer tokens and turns them into identities.
type JWTVerifier struct {
	cfg    JWTConfig
	jwks   keyfunc.Keyfunc
	parser *jwt.Parser
}

var asymmetricAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// NewJWTVerifier checks cfg and parses its key set.
func NewJWTVerifier(cfg JWTConfig) (*JWTVerifier, error) {
	if len(cfg.HS256Secret) == 0 && len(cfg.JWKS) == 0 {
		return nil, errors.New("auth: JWT needs an HS256 secret or a JWKS")
	}
	if n := len(cfg.HS256Secret); n > 0 && n < 32 {
		return nil, fmt.Errorf("auth: the HS256 secret has %d bytes; want at least 32 (RFC 7518 §3.2)", n)
	}
	if cfg.UserClaim == "" {
		cfg.UserClaim = DefaultUserClaim
	}
	if cfg.Leeway <= 0 {
		cfg.Leeway = 30 * time.Second
	}
	v := &JWTVerifier{cfg: cfg}
	var algs []string
	if len(cfg.HS256Secret) > 0 {
		algs = append(algs, "HS256")
	}
	if len(cfg.JWKS) > 0 {
		kf, err := keyfunc.NewJWKSetJSON(json.RawMessage(cfg.JWKS))
		if err != nil {
			return nil, fmt.Errorf("auth: JWKS: %w", err)
		}
		v.jwks = kf
		algs = append(algs, asymmetricAlgs...)
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(algs),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// keyFor picks the key by algorithm family, so that an HMAC token is only
// ever checked against the HS256 secret and never against a public key
// (the classic algorithm-confusion attack).
func (v *JWTVerifier) keyFor(t *jwt.Token) (any, error) {
	if strings.HasPrefix(t.Method.Alg(), "HS") {
		if len(v.cfg.HS256Secret) == 0 {
			return nil, errors.New("HMAC tokens are not accepted")
		}
		return v.cfg.HS256Secret, nil
	}
	if v.jwks == nil {
		return nil, errors.New("no JWKS to verify asymmetric tokens")
	}
	return v.jwks.Keyfunc(t)
}

// Verify checks token's signature, exp, nbf, iat, iss and aud and returns
// the identity its claims name, with the token's issuer: the same user
// claim from two issuers names two identities.
func (v *JWTVerifier) Verify(token string) (Identity, error) {
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, claims, v.keyFor); err != nil {
		return Identity{}, err
	}
	user, _ := claims[v.cfg.UserClaim].(string)
	if strings.TrimSpace(user) == "" {
		return Identity{}, fmt.Errorf("%w: claim %q is missing or not a string", jwt.ErrTokenInvalidClaims, v.cfg.UserClaim)
	}
	iss, err := claims.GetIssuer()
	if err != nil {
		return Identity{}, fmt.Errorf("%w: iss: %w", jwt.ErrTokenInvalidClaims, err)
	}
	id := Identity{User: user, Method: MethodJWT, Issuer: iss}
	if v.cfg.RolesClaim != "" {
		roles, err := rolesClaim(claims, v.cfg.RolesClaim)
		if err != nil {
			return Identity{}, fmt.Errorf("%w: %w", jwt.ErrTokenInvalidClaims, err)
		}
		id.Roles = roles
	}
	return id, nil
}

// rolesClaim reads a dotted claim path holding an array of strings or a
// space-separated string. A missing claim means no roles.
func rolesClaim(claims jwt.MapClaims, name string) ([]string, error) {
	var cur any = map[string]any(claims)
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, nil
		}
		if cur, ok = m[part]; !ok {
			return nil, nil
		}
	}
	switch r := cur.(type) {
	case nil:
		return nil, nil
	case string:
		return strings.Fields(r), nil
	case []any:
		out := make([]string, 0, len(r))
		for _, x := range r {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("claim %q holds a non-string role", name)
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("claim %q is neither a string nor an array of strings", name)
	}
}

// looksLikeJWT tells a compact JWS (three base64url parts, the first a JSON
// object with "alg") from an opaque API key.
func looksLikeJWT(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return false
	}
	hdr, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	return json.Unmarshal(hdr, &h) == nil && h.Alg != ""
}
