package wire

// PropCaller is the caller assertion of a request: a compact JWS (RFC
// 7515) the gateway signs for each call with its caller key (EdDSA over
// Ed25519, or ES256), whose claims are CallerClaims. It tells a tool
// service who the call comes from, as the gateway authenticated them, and
// proves that a gateway of the deployment sent it: a service checks it
// against the gateway's public keys (the JWKS the gateway serves at
// CallerJWKSPath) and refuses what is missing, forged, expired, replayed
// or meant for another service. toolgate writes it as a word of PropCall
// ("caller=<JWS>"); ExpandCall gives it as a property of its own.
// TrustGraph's Python services ignore it.
const PropCaller = "toolgate-caller"

// CallerJWKSPath is where a gateway serves the public keys of its caller
// assertions, as a JWK Set (RFC 7517), on its admin listener.
const CallerJWKSPath = "/.well-known/toolgate-caller-jwks.json"

// CallerAssertionType is the "typ" of a caller assertion's JWS header: a
// token of another kind signed with the same key is not one.
const CallerAssertionType = "toolgate-caller+jwt"

// ErrorTypeCallerRefused is the error type a service answers a request
// whose caller assertion it refuses with. The gateway maps it to
// PERMISSION_DENIED (HTTP 403): the caller did authenticate with the
// gateway; the service does not take the gateway's word for it.
const ErrorTypeCallerRefused = "permission-denied"

// CallerClaims are the claims of a caller assertion (PropCaller).
type CallerClaims struct {
	// Issuer names the deployment of gateways that signed it.
	Issuer string `json:"iss"`
	// Subject is who the call comes from as the gateway knows them:
	// "source:name" ("api-key:alice", "jwt(https://idp.example):bob",
	// "mtls:svc.example", "anonymous:anonymous"), the identity the
	// operator joined the caller to when there is one.
	Subject string `json:"sub"`
	// Source is how the caller authenticated: "api-key", "jwt", "mtls"
	// or "anonymous".
	Source string `json:"src"`
	// Roles are the caller's roles, as its credential states them.
	Roles []string `json:"roles,omitempty"`
	// Audience is the tool service the call is for: its id, or its
	// request topic when it has none.
	Audience string `json:"aud"`
	// Tool is the tool called, by the registry's name.
	Tool string `json:"tool"`
	// ToolSet is the tool set the call was made in ("" for none).
	ToolSet string `json:"tool_set,omitempty"`
	// ID is the request's correlation id (PropID): an assertion is good
	// for one request, once.
	ID string `json:"jti"`
	// IssuedAt and Expires, in Unix seconds: Expires is the call's
	// deadline, rounded up to the second.
	IssuedAt int64 `json:"iat"`
	Expires  int64 `json:"exp"`
}
