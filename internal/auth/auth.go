// Package auth authenticates and authorizes calls to the gateway: its
// Middleware establishes a call's caller (toolcall.Caller) from an API key,
// a JWT bearer token, a verified client certificate or, when enabled, an
// anonymous fallback, and checks the call against a Policy. Every door
// runs it the same way, over the toolcall.Call it built. For gRPC it also
// offers TapHandle, which refuses metadata reserved for the gateway.
//
// A caller is known by where its identity comes from as well as by its
// name (toolcall.Subject): the API-key user alice and a JWT whose sub is
// alice are two callers — two owners of operations, two rate-limit
// buckets, two subjects of the policy — unless the policy's identities
// join them.
package auth

import "github.com/toolgate/toolgate/internal/toolcall"

// How an Identity was established: the source of its Subject.
const (
	MethodAPIKey    = toolcall.SourceAPIKey
	MethodJWT       = toolcall.SourceJWT
	MethodMTLS      = toolcall.SourceMTLS
	MethodAnonymous = toolcall.SourceAnonymous
)

// Identity is an authenticated caller: the core's toolcall.Caller.
type Identity = toolcall.Caller

// Subject is an identity named with its source (toolcall.Subject): what a
// policy's users, roles and identities name.
type Subject = toolcall.Subject
