// Package auth authenticates and authorizes calls to the gateway's gRPC
// server — and so REST calls too, which grpc-gateway makes through the same
// server. It offers gRPC interceptors that establish an Identity from an API
// key, a JWT bearer token, a verified client certificate (directly, or
// forwarded by the HTTP side through Forwarder) or, when enabled, an
// anonymous fallback, and then check the call against a Policy.
package auth

import (
	"context"
	"slices"
)

// How an Identity was established.
const (
	MethodAPIKey    = "api-key"
	MethodJWT       = "jwt"
	MethodMTLS      = "mtls"
	MethodAnonymous = "anonymous"
)

// Identity is an authenticated caller.
type Identity struct {
	// User names the caller; it becomes the tool-service envelope's user.
	User string
	// Roles are the caller's roles, as its credential states them.
	Roles []string
	// Method says how the identity was established: MethodAPIKey,
	// MethodJWT, MethodMTLS or MethodAnonymous.
	Method string
}

// HasRole reports whether the identity has role r.
func (id Identity) HasRole(r string) bool { return slices.Contains(id.Roles, r) }

type identityKey struct{}

// FromContext returns the identity the interceptors attached to a call's
// context. ok is false for calls that were not authenticated (public
// methods, or a server without the interceptors).
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// User returns the authenticated user of a call's context, or "" when it
// has none. It suits limits.WithKey.
func User(ctx context.Context) string {
	id, _ := FromContext(ctx)
	return id.User
}

// newContext attaches id to ctx. Only the interceptors call it, so an
// identity in a context was always established by this package.
func newContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}
