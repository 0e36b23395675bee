package auth

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

func TestJWTVerifyClaims(t *testing.T) {
	t.Parallel()
	k := keys(t)
	v, err := NewJWTVerifier(JWTConfig{HS256Secret: k.secret, UserClaim: "email", RolesClaim: "realm_access.roles"})
	if err != nil {
		t.Fatal(err)
	}
	scoped, err := NewJWTVerifier(JWTConfig{HS256Secret: k.secret, RolesClaim: "scope"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		v       *JWTVerifier
		c       jwt.MapClaims
		user    string
		roles   []string
		wantErr error
	}{
		{"custom user claim, nested roles", v, claims("sub-1", func(c jwt.MapClaims) {
			c["email"] = "a@example.com"
			c["realm_access"] = map[string]any{"roles": []string{"admin", "ops"}}
		}), "a@example.com", []string{"admin", "ops"}, nil},
		{"missing roles claim is no roles", v, claims("sub-1", func(c jwt.MapClaims) { c["email"] = "a@example.com" }), "a@example.com", nil, nil},
		{"missing user claim", v, claims("sub-1"), "", nil, jwt.ErrTokenInvalidClaims},
		{"non-string user claim", v, claims("sub-1", func(c jwt.MapClaims) { c["email"] = 7 }), "", nil, jwt.ErrTokenInvalidClaims},
		{"roles with a non-string", v, claims("sub-1", func(c jwt.MapClaims) {
			c["email"] = "a@example.com"
			c["realm_access"] = map[string]any{"roles": []any{"admin", 1}}
		}), "", nil, jwt.ErrTokenInvalidClaims},
		{"space-separated roles", scoped, claims("u", func(c jwt.MapClaims) { c["scope"] = "read  write" }), "u", []string{"read", "write"}, nil},
		{"no issuer or audience configured accepts any", scoped, claims("u", func(c jwt.MapClaims) { c["iss"], c["aud"] = "x", "y" }), "u", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := tc.v.Verify(sign(t, jwt.SigningMethodHS256, k.secret, "", tc.c))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err == nil && (id.User != tc.user || !slices.Equal(id.Roles, tc.roles) || id.Method != MethodJWT) {
				t.Fatalf("identity %+v, want user %q roles %v", id, tc.user, tc.roles)
			}
		})
	}
}

// TestJWTAlgorithmFamilies checks that a verifier only takes the
// algorithms it has keys for, so no token can be checked with the wrong
// kind of key.
func TestJWTAlgorithmFamilies(t *testing.T) {
	t.Parallel()
	k := keys(t)
	hmacOnly, err := NewJWTVerifier(JWTConfig{HS256Secret: k.secret})
	if err != nil {
		t.Fatal(err)
	}
	jwksOnly, err := NewJWTVerifier(JWTConfig{JWKS: k.jwks})
	if err != nil {
		t.Fatal(err)
	}
	hs := sign(t, jwt.SigningMethodHS256, k.secret, "", claims("u"))
	rs := sign(t, jwt.SigningMethodRS256, k.rsa, "rsa-1", claims("u"))
	tests := []struct {
		name  string
		v     *JWTVerifier
		token string
		ok    bool
	}{
		{"HMAC verifier takes HS256", hmacOnly, hs, true},
		{"HMAC verifier refuses RS256", hmacOnly, rs, false},
		{"JWKS verifier takes RS256", jwksOnly, rs, true},
		{"JWKS verifier refuses HS256", jwksOnly, hs, false},
		{"HS384 is not accepted", hmacOnly, sign(t, jwt.SigningMethodHS384, k.secret, "", claims("u")), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := tc.v.Verify(tc.token); (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestNewJWTVerifier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     JWTConfig
		wantErr string
	}{
		{"nothing", JWTConfig{}, "needs an HS256 secret or a JWKS"},
		{"short secret", JWTConfig{HS256Secret: []byte("short")}, "at least 32"},
		{"bad JWKS", JWTConfig{JWKS: []byte("{not json")}, "JWKS"},
		{"secret", JWTConfig{HS256Secret: make([]byte, 32)}, ""},
		{"JWKS", JWTConfig{JWKS: keys(t).jwks}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewJWTVerifier(tc.cfg)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestLooksLikeJWT(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{sign(t, jwt.SigningMethodHS256, keys(t).secret, "", claims("u")), true},
		{"eyJhbGciOiJIUzI1NiJ9.e30.", true}, // empty signature part
		{aliceKey, false},
		{"a.b.c", false},       // not base64 JSON
		{"e30.e30.e30", false}, // JSON without alg
		{"eyJhbGciOiJIUzI1NiJ9.e30", false},
		{"", false},
	}
	for _, tc := range tests {
		if got := looksLikeJWT(tc.in); got != tc.want {
			t.Errorf("looksLikeJWT(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
