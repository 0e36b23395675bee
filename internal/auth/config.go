package auth

import (
	"bytes"
	"fmt"
	"os"

	"github.com/toolgate/toolgate/internal/toolcall"
)

// Config is who may call, as the gateway's flags say (internal/config's
// Auth): the credential files, JWT checks, the policy and anonymous
// access. FromConfig turns it into an Authenticator.
type Config struct {
	APIKeys        string // file of hashed API keys
	JWTSecretFile  string // HS256 secret
	JWTJWKSFile    string // public keys of asymmetric tokens
	JWTIssuer      string
	JWTAudience    string
	JWTUserClaim   string // default DefaultUserClaim
	JWTRolesClaim  string
	Policy         string // authorization policy file
	AllowAnonymous bool
	DefaultUser    string // the user of anonymous calls
	ClientCerts    bool   // client certificates identify callers (--client-ca)
}

// FromConfig builds the Authenticator the gateway's flags describe: it
// reads the API key, JWT secret or JWKS and policy files, and adds opts
// (the logger) after what the files give.
func FromConfig(c Config, opts ...Option) (*Authenticator, error) {
	var base []Option
	if c.ClientCerts {
		base = append(base, WithClientCerts())
	}
	if c.APIKeys != "" {
		keys, err := LoadAPIKeys(c.APIKeys)
		if err != nil {
			return nil, err
		}
		base = append(base, WithAPIKeys(keys))
	}
	if c.JWTSecretFile != "" || c.JWTJWKSFile != "" {
		jc := JWTConfig{Issuer: c.JWTIssuer, Audience: c.JWTAudience, UserClaim: c.JWTUserClaim, RolesClaim: c.JWTRolesClaim}
		if c.JWTSecretFile != "" {
			b, err := os.ReadFile(c.JWTSecretFile)
			if err != nil {
				return nil, fmt.Errorf("--jwt-hs256-secret-file: %w", err)
			}
			jc.HS256Secret = bytes.TrimSpace(b)
		}
		if c.JWTJWKSFile != "" {
			b, err := os.ReadFile(c.JWTJWKSFile)
			if err != nil {
				return nil, fmt.Errorf("--jwt-jwks-file: %w", err)
			}
			jc.JWKS = b
		}
		v, err := NewJWTVerifier(jc)
		if err != nil {
			return nil, err
		}
		base = append(base, WithJWT(v))
	}
	if c.Policy != "" {
		p, err := LoadPolicy(c.Policy)
		if err != nil {
			return nil, err
		}
		base = append(base, WithPolicy(p))
	}
	if c.AllowAnonymous {
		base = append(base, WithAnonymous(c.DefaultUser))
	}
	return New(append(base, opts...)...)
}

// Visible reports whether the caller of c may list tool: what
// toolcall.Options.Visible asks. Without a policy every authenticated
// caller may.
func (a *Authenticator) Visible(c *toolcall.Call, tool string) bool {
	if a.policy == nil {
		return true
	}
	return c.Authenticated && a.policy.Allowed(c.Caller, ActionList, tool)
}
