// Package auth authenticates and authorizes calls to the gateway: its
// Middleware establishes a call's caller (toolcall.Caller) from an API key,
// a JWT bearer token, a verified client certificate or, when enabled, an
// anonymous fallback, and checks the call against a Policy. Every door
// runs it the same way, over the toolcall.Call it built. For gRPC it also
// offers TapHandle, which refuses metadata reserved for the gateway.
package auth

import "github.com/toolgate/toolgate/internal/toolcall"

// How an Identity was established.
const (
	MethodAPIKey    = "api-key"
	MethodJWT       = "jwt"
	MethodMTLS      = "mtls"
	MethodAnonymous = "anonymous"
)

// Identity is an authenticated caller: the core's toolcall.Caller.
type Identity = toolcall.Caller
