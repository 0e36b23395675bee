package auth

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Metadata keys starting with ReservedPrefix belong to the gateway. A call
// from outside that carries one, other than a valid forwarded identity, is
// refused, and HeaderMatcher never forwards an HTTP header into one.
const ReservedPrefix = "x-toolgate-"

// forwardedKey carries an identity the HTTP side authenticated from a
// client certificate across the gateway's own gRPC connection.
const forwardedKey = ReservedPrefix + "forwarded-identity"

// certIdentity names the user of a verified client certificate: the
// subject's CommonName, or else the first URI SAN (a SPIFFE ID, say), or
// else the first DNS SAN. The subject's OrganizationalUnits are the roles.
func certIdentity(c *x509.Certificate) (Identity, error) {
	user := c.Subject.CommonName
	switch {
	case user != "":
	case len(c.URIs) > 0:
		user = c.URIs[0].String()
	case len(c.DNSNames) > 0:
		user = c.DNSNames[0]
	default:
		return Identity{}, errors.New("the client certificate has no CommonName, URI or DNS name")
	}
	return Identity{User: user, Roles: append([]string(nil), c.Subject.OrganizationalUnit...), Method: MethodMTLS}, nil
}

// verifiedLeaf returns the leaf of the first verified chain, or nil when
// the connection carries no certificate the TLS stack verified.
func verifiedLeaf(cs *tls.ConnectionState) *x509.Certificate {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}

// Forwarder carries client-certificate identities from the HTTP side to
// the gRPC interceptors. grpc-gateway makes its calls over a connection of
// its own, so the gRPC server never sees an HTTP caller's certificate:
//
//  1. Middleware checks the HTTPS request's verified client certificate and
//     puts its identity into the request context (never into a header).
//  2. The gateway's own connection, dialled with DialOption, turns that
//     context value into a token under metadata key
//     "x-toolgate-forwarded-identity": an HS256 JWT signed with a key made
//     at random when the Forwarder is, which never leaves the process,
//     bound to the RPC method and valid for one minute.
//  3. The Authenticator built WithForwarder(f) accepts only tokens f signed.
//
// A caller can therefore not claim an identity through a header or
// metadata: it cannot sign the token, HeaderMatcher never maps an HTTP
// header to a reserved key, and calls bearing a reserved key that does not
// verify are refused.
type Forwarder struct {
	key []byte
	now func() time.Time
}

// forwardTTL bounds how long a forwarded token verifies.
const forwardTTL = time.Minute

const forwardAudience = "toolgate-internal"

// NewForwarder returns a Forwarder with a fresh random signing key.
func NewForwarder() (*Forwarder, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("auth: forwarder key: %w", err)
	}
	return &Forwarder{key: key, now: time.Now}, nil
}

type forwardCtxKey struct{}

// Middleware authenticates HTTPS requests that present a client
// certificate the server verified (tls.Config.ClientAuth
// VerifyClientCertIfGiven or RequireAndVerifyClientCert, with ClientCAs)
// and records the identity for DialOption's connection. Requests without
// one pass through unchanged; they may still carry a bearer credential.
func (f *Forwarder) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if leaf := verifiedLeaf(r.TLS); leaf != nil {
			if id, err := certIdentity(leaf); err == nil {
				r = r.WithContext(context.WithValue(r.Context(), forwardCtxKey{}, id))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// DialOption makes a client connection forward the identities Middleware
// recorded. Use it only on the gateway's own connection to its server.
func (f *Forwarder) DialOption() grpc.DialOption {
	return grpc.WithPerRPCCredentials(forwardCreds{f})
}

type forwardClaims struct {
	jwt.RegisteredClaims
	Roles []string `json:"roles,omitempty"`
	RPC   string   `json:"rpc"`
}

func (f *Forwarder) sign(id Identity, method string) (string, error) {
	now := f.now()
	c := forwardClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   id.User,
			Audience:  jwt.ClaimStrings{forwardAudience},
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(forwardTTL)),
		},
		Roles: id.Roles,
		RPC:   method,
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(f.key)
}

func (f *Forwarder) verify(token, method string) (Identity, error) {
	var c forwardClaims
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{"HS256"}),
		jwt.WithAudience(forwardAudience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(f.now),
	)
	if _, err := p.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return f.key, nil }); err != nil {
		return Identity{}, err
	}
	if c.RPC != method {
		return Identity{}, fmt.Errorf("forwarded identity was issued for %q, not %q", c.RPC, method)
	}
	if c.Subject == "" {
		return Identity{}, errors.New("forwarded identity has no user")
	}
	return Identity{User: c.Subject, Roles: c.Roles, Method: MethodMTLS}, nil
}

// forwardCreds implements credentials.PerRPCCredentials.
type forwardCreds struct{ f *Forwarder }

func (c forwardCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	id, ok := ctx.Value(forwardCtxKey{}).(Identity)
	if !ok {
		return nil, nil
	}
	ri, _ := credentials.RequestInfoFromContext(ctx)
	tok, err := c.f.sign(id, ri.Method)
	if err != nil {
		return nil, err
	}
	return map[string]string{forwardedKey: tok}, nil
}

// RequireTransportSecurity is false: the connection is the gateway's own,
// usually over loopback without TLS; the token is signed, not secret.
func (forwardCreds) RequireTransportSecurity() bool { return false }

// forwarded returns the verified forwarded identity in md, if any. Any
// value under the key that does not verify is an error: it did not come
// from this process.
func (f *Forwarder) forwarded(md metadata.MD, method string) (Identity, bool, error) {
	vals := md.Get(forwardedKey)
	switch {
	case len(vals) == 0:
		return Identity{}, false, nil
	case f == nil:
		return Identity{}, false, errors.New("a forwarded identity arrived but none is trusted")
	case len(vals) > 1:
		return Identity{}, false, fmt.Errorf("%d forwarded identities", len(vals))
	}
	id, err := f.verify(vals[0], method)
	if err != nil {
		return Identity{}, false, err
	}
	return id, true, nil
}
