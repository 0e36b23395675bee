package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/golang-jwt/jwt/v5"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/tap"
)

// Metadata keys credentials arrive under.
const (
	authorizationMD = "authorization"
	apiKeyMD        = "x-api-key"
)

// MsgMissingCredentials is the status message of a call without
// credentials when anonymous calls are not allowed.
const MsgMissingCredentials = "missing credentials: send Authorization: Bearer <API key or JWT>"

// The ErrorInfo reasons (domain toolcall.ErrorDomain) of the refusals of
// authentication and authorization.
const (
	ReasonMissingCredentials = "MISSING_CREDENTIALS"
	ReasonInvalidCredentials = "INVALID_CREDENTIALS"
	ReasonNotAllowed         = "NOT_ALLOWED"
)

// Authenticator establishes and checks the identity of calls. Build it
// with New and run its Middleware; install TapHandle on the gRPC server.
type Authenticator struct {
	keys        *APIKeys
	jwt         *JWTVerifier
	clientCerts bool
	anonymous   bool
	anonUser    string
	policy      *Policy
	log         *slog.Logger
}

// Option configures an Authenticator.
type Option func(*Authenticator)

// WithAPIKeys accepts the API keys in k, sent as "authorization: Bearer
// <key>" or "x-api-key: <key>".
func WithAPIKeys(k *APIKeys) Option { return func(a *Authenticator) { a.keys = k } }

// WithJWT accepts JWT bearer tokens that v verifies.
func WithJWT(v *JWTVerifier) Option { return func(a *Authenticator) { a.jwt = v } }

// WithClientCerts accepts a client certificate the server's TLS verified
// (see certIdentity for how it names the user), found in the call's
// connection (toolcall.Call.TLS). Only calls with no bearer credential
// use it.
func WithClientCerts() Option { return func(a *Authenticator) { a.clientCerts = true } }

// WithAnonymous lets calls without any credential through as user, with
// Method MethodAnonymous. Without it they fail with Unauthenticated.
func WithAnonymous(user string) Option {
	return func(a *Authenticator) { a.anonymous, a.anonUser = true, user }
}

// WithPolicy authorizes every authenticated call against p: what p does
// not allow is denied. Without a policy every authenticated call is
// allowed.
func WithPolicy(p *Policy) Option { return func(a *Authenticator) { a.policy = p } }

// WithLogger logs why calls were refused (default: discard).
func WithLogger(l *slog.Logger) Option { return func(a *Authenticator) { a.log = l } }

// New returns an Authenticator. It fails when no call could ever be
// authenticated: no keys, JWT, client certificates, nor
// anonymous calls.
func New(opts ...Option) (*Authenticator, error) {
	a := &Authenticator{}
	for _, o := range opts {
		o(a)
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.keys == nil && a.jwt == nil && !a.clientCerts && !a.anonymous {
		return nil, errors.New("auth: nothing to authenticate with: configure API keys, JWT or client certificates, or allow anonymous calls")
	}
	if a.anonymous && strings.TrimSpace(a.anonUser) == "" {
		return nil, errors.New("auth: anonymous calls need a user name")
	}
	if u := a.policy.Unqualified(); len(u) > 0 && (a.jwt != nil || a.clientCerts || a.anonymous) {
		a.log.Warn("policy: users and roles written without a source name API-key users and roles only; "+
			"write jwt(<issuer>):name, mtls:name or anonymous:name for the others, api-key:name to silence this",
			"entries", u)
	}
	return a, nil
}

// refusal is an authentication failure: a safe message for the client and
// a cause for the log.
type refusal struct {
	msg   string
	cause error
}

func (r *refusal) Error() string { return r.msg + ": " + r.cause.Error() }

func refuse(msg string, cause error) *refusal { return &refusal{msg: msg, cause: cause} }

// TapHandle is the gRPC server's tap (grpc.InTapHandle): it refuses, as
// Unauthenticated, a call whose metadata holds a key reserved for the
// gateway (ReservedPrefix), whatever else it carries. It reads the
// transport's headers as they are, before the call starts, so the
// gRPC door need not copy every call's metadata to look. (The HTTP doors
// never pass such headers on.)
func (a *Authenticator) TapHandle() tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		for k := range info.Header {
			if strings.HasPrefix(strings.ToLower(k), ReservedPrefix) {
				return nil, a.failMethod(ctx, info.FullMethodName, "", refuse("metadata "+k+" is reserved for the gateway", errors.New("reserved metadata from outside")))
			}
		}
		return ctx, nil
	}
}

// authenticate establishes the identity of a call to method.
//
// Order: an explicit bearer credential (Authorization or X-Api-Key) wins
// and is never second-guessed — if it is bad the call fails; else the
// connection's verified client certificate; else the anonymous user, when
// allowed. (Reserved metadata is refused before: TapHandle.)
func (a *Authenticator) authenticate(c *toolcall.Call) (Identity, error) {
	h := c.Header
	if h == nil {
		h = toolcall.NoHeader
	}
	cred, kind, err := credential(h.Values(authorizationMD), h.Values(apiKeyMD))
	if err != nil {
		return Identity{}, err
	}
	if cred != "" {
		return a.bearer(cred, kind)
	}
	if a.clientCerts && c.TLS != nil {
		if leaf := verifiedLeaf(c.TLS); leaf != nil {
			id, err := certIdentity(leaf)
			if err != nil {
				return Identity{}, refuse("client certificate names no user", err)
			}
			return id, nil
		}
	}
	if a.anonymous {
		return Identity{User: a.anonUser, Method: MethodAnonymous}, nil
	}
	return Identity{}, refuse(MsgMissingCredentials, errors.New("no credentials"))
}

// credential returns the one bearer credential among a call's
// authorization and x-api-key metadata values, and the key it came under;
// "" when there is none.
func credential(authz, keys []string) (cred, kind string, err error) {
	if len(authz)+len(keys) > 1 {
		return "", "", refuse("send one credential, in Authorization or X-Api-Key", fmt.Errorf("%d authorization and %d x-api-key values", len(authz), len(keys)))
	}
	if len(keys) == 1 {
		k := strings.TrimSpace(keys[0])
		if k == "" {
			return "", "", refuse("empty X-Api-Key", errors.New("empty x-api-key"))
		}
		return k, apiKeyMD, nil
	}
	if len(authz) == 1 {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(authz[0]), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			return "", "", refuse("unsupported Authorization: send Authorization: Bearer <API key or JWT>", errors.New("not a bearer credential"))
		}
		return strings.TrimSpace(tok), authorizationMD, nil
	}
	return "", "", nil
}

// bearer authenticates a presented API key or JWT. A credential shaped
// like a JWT is checked as one when JWTs are accepted; anything else is
// an API key.
func (a *Authenticator) bearer(cred, kind string) (Identity, error) {
	if kind == authorizationMD && a.jwt != nil && looksLikeJWT(cred) {
		id, err := a.jwt.Verify(cred)
		switch {
		case err == nil:
			return id, nil
		case errors.Is(err, jwt.ErrTokenExpired):
			return Identity{}, refuse("token expired", err)
		case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
			return Identity{}, refuse("token not valid yet", err)
		default:
			return Identity{}, refuse("invalid token", err)
		}
	}
	if a.keys == nil {
		return Identity{}, refuse("invalid credentials", errors.New("API keys are not enabled and the credential is not an acceptable JWT"))
	}
	id, ok := a.keys.Lookup(cred)
	if !ok {
		return Identity{}, refuse("invalid API key", errors.New("no such key"))
	}
	return id, nil
}

// fail turns an authentication error into a status, logging the cause.
func (a *Authenticator) fail(ctx context.Context, c *toolcall.Call, err error) error {
	return a.failMethod(ctx, c.MethodName(), c.PeerName(), err)
}

func (a *Authenticator) failMethod(ctx context.Context, method, peer string, err error) error {
	var r *refusal
	if !errors.As(err, &r) {
		r = refuse("authentication failed", err)
	}
	attrs := []any{"rpc", method, "reason", r.msg, "cause", r.cause}
	if peer != "" {
		attrs = append(attrs, "peer", peer)
	}
	a.log.InfoContext(ctx, "call refused: not authenticated", attrs...)
	reason := ReasonInvalidCredentials
	if r.msg == MsgMissingCredentials {
		reason = ReasonMissingCredentials
	}
	return toolcall.GatewayError(codes.Unauthenticated, reason, r.msg, nil)
}

// authorize checks the call's caller against the policy.
func (a *Authenticator) authorize(ctx context.Context, c *toolcall.Call) error {
	if a.policy == nil {
		return nil
	}
	id, method := c.Caller, c.MethodName()
	action, tool, known := resource(c)
	var msg string
	switch {
	case !known:
		msg = "permission denied: " + method + " is not covered by the access policy"
	case action == "":
		return nil
	case a.policy.Allowed(id, action, tool):
		return nil
	}
	// The policy decides on the registry's name of the tool; the caller is
	// told the name it gave, which in a tool set may be the set's for it.
	shown := tool
	if tool != "" {
		shown = c.ShownName()
	}
	if msg == "" {
		what := "tools"
		if shown != "" {
			what = fmt.Sprintf("tool %q", shown)
		}
		msg = fmt.Sprintf("permission denied: user %q (%s) may not %s %s", id.User, id.Subject().Origin(), action, what)
	}
	attrs := append(callerAttrs(id), "rpc", method, "action", action, "tool", tool)
	if c.Set != "" {
		attrs = append(attrs, "tool_set", c.Set, "shown_as", shown)
	}
	a.log.InfoContext(ctx, "call refused: not authorized", attrs...)
	md := map[string]string{"action": action}
	if shown != "" {
		md["tool"] = shown
	}
	if c.Set != "" {
		md["tool_set"] = c.Set
	}
	return toolcall.GatewayError(codes.PermissionDenied, ReasonNotAllowed, msg, md)
}

// callerAttrs are the log attributes naming a caller: its user, where the
// identity comes from ("api-key", "jwt(https://idp.example)"), and, when
// the policy joined it to another, the subject it acts as.
func callerAttrs(id Identity) []any {
	attrs := []any{"user", id.User, "source", id.Subject().Origin()}
	if id.As.Source != "" {
		attrs = append(attrs, "as", id.As.String())
	}
	return attrs
}
