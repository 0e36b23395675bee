package toolservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/toolgate/toolgate/wire"
)

// Caller is who a call comes from, as the gateway that sent it asserts
// in the request's caller assertion (wire.PropCaller), checked against the
// gateway's keys (WithCallerJWKS). A handler reads it with CallerFrom.
type Caller struct {
	// Issuer names the deployment of gateways that signed the assertion.
	Issuer string
	// Subject is the caller as the gateway knows them, "source:name":
	// "api-key:alice", "jwt(https://idp.example):bob", "mtls:svc",
	// "anonymous:anonymous".
	Subject string
	// Source is how the caller authenticated with the gateway: "api-key",
	// "jwt", "mtls" or "anonymous".
	Source string
	// Roles are the caller's roles, as its credential states them.
	Roles []string
	// Tool is the tool called; ToolSet the tool set it was called in
	// ("" for none).
	Tool, ToolSet string
	// Audience is the service the assertion is for (this one).
	Audience string
	// RequestID is the request's correlation id (the assertion's jti).
	RequestID string
	// IssuedAt and Expires bound the assertion: Expires is the call's
	// deadline.
	IssuedAt, Expires time.Time
}

type callerKey struct{}

// CallerFrom returns the caller of the call whose context ctx is, when
// the service checks caller assertions (WithCallerJWKS): every call it
// runs then has one. Without WithCallerJWKS, ok is false.
func CallerFrom(ctx context.Context) (c Caller, ok bool) {
	p, ok := ctx.Value(callerKey{}).(*Caller)
	if !ok {
		return Caller{}, false
	}
	return *p, true
}

// Bounds of the caller check.
const (
	// DefaultCallerLeeway is how far the clocks of the gateway and the
	// service may disagree on an assertion's exp and iat.
	DefaultCallerLeeway = 5 * time.Second
	// callerKeysReload is how soon after reading the keys a request
	// naming an unknown key reads them again; callerKeysMaxAge how old
	// the keys may grow before a request reads them again (a key
	// withdrawn from the set stops being accepted then).
	callerKeysReload = 5 * time.Second
	callerKeysMaxAge = 10 * time.Minute
	// callerSeenMax bounds the assertions remembered until they expire,
	// against replays: beyond it, calls are refused as unavailable until
	// some expire (a gateway sends no more than its deadlines allow).
	callerSeenMax = 1 << 18
	// maxJWKSBytes bounds a JWK Set read.
	maxJWKSBytes = 1 << 20
)

// WithCallerJWKS makes the service check every request's caller
// assertion (wire.PropCaller) against the gateway's public keys, a JWK Set
// read from source: a file, or an http(s) URL (the gateway's admin
// listener serves it at wire.CallerJWKSPath). A request whose assertion is
// missing, not signed by one of those keys, expired, meant for another
// service (its audience is neither Config.ID nor the request topic, unless
// WithCallerAudience says otherwise), for another request (its jti is not
// the request's id) or seen before is refused before the handler runs,
// with an error of type wire.ErrorTypeCallerRefused — PERMISSION_DENIED at
// the gateway — that says why. The handler reads the caller with
// CallerFrom.
//
// The keys are read when New runs (a file that cannot be read or holds no
// keys fails New; a URL that cannot be reached then is read again on the
// first request), again when a request names a key they do not hold —
// a rotation — at most every 5 s, and again once they are 10 min old.
func WithCallerJWKS(source string) Option {
	return func(o *options) {
		if strings.TrimSpace(source) == "" {
			o.errs = append(o.errs, errors.New("WithCallerJWKS: empty source"))
		}
		o.callerJWKS = source
	}
}

// WithCallerAudience sets the audiences a caller assertion may name: the
// id the gateway's registry knows the service by, when it is not
// Config.ID (nor the request topic, the audience of a service the
// registry names no id for). Only with WithCallerJWKS.
func WithCallerAudience(aud ...string) Option {
	return func(o *options) {
		if len(aud) == 0 {
			o.errs = append(o.errs, errors.New("WithCallerAudience: no audience"))
		}
		o.callerAud = append(o.callerAud, aud...)
	}
}

// WithCallerIssuer makes the caller check require the assertions' issuer
// to be iss (the gateways' --caller-issuer). Only with WithCallerJWKS.
func WithCallerIssuer(iss string) Option {
	return func(o *options) {
		if iss == "" {
			o.errs = append(o.errs, errors.New("WithCallerIssuer: empty issuer"))
		}
		o.callerIss = iss
	}
}

// errCallerBusy refuses a call whose assertion cannot be remembered.
var errCallerBusy = errors.New("too many caller assertions to remember against replays; retry shortly")

// callerCheck checks caller assertions.
type callerCheck struct {
	source string
	parser *jwt.Parser
	// reloadAfter and maxAge: callerKeysReload and callerKeysMaxAge (a
	// test shortens them).
	reloadAfter, maxAge time.Duration
	client              *http.Client

	mu     sync.Mutex // held while the keys are read
	tried  time.Time  // when they were last read, or tried to be (guarded by mu)
	keys   atomic.Pointer[keySet]
	seen   seenIDs
	now    func() time.Time
	leeway time.Duration
}

// keySet is the keys read, and when.
type keySet struct {
	kf   keyfunc.Keyfunc
	read time.Time
}

func newCallerCheck(source string, aud []string, iss string) (*callerCheck, error) {
	c := &callerCheck{source: source, reloadAfter: callerKeysReload, maxAge: callerKeysMaxAge, now: time.Now, leeway: DefaultCallerLeeway,
		client: &http.Client{Timeout: 10 * time.Second}}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{"EdDSA", "ES256"}),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(c.leeway),
		jwt.WithAudience(aud...), jwt.WithTimeFunc(func() time.Time { return c.now() }),
	}
	if iss != "" {
		opts = append(opts, jwt.WithIssuer(iss))
	}
	c.parser = jwt.NewParser(opts...)
	c.seen.init()
	if err := c.reload(); err != nil && !isURL(source) {
		return nil, err
	}
	return c, nil
}

func isURL(s string) bool { return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") }

// reload reads the keys from the source.
func (c *callerCheck) reload() error {
	c.tried = c.now()
	var (
		b   []byte
		err error
	)
	if isURL(c.source) {
		b, err = c.fetch()
	} else {
		b, err = os.ReadFile(c.source)
	}
	if err != nil {
		return fmt.Errorf("caller keys: %w", err)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return fmt.Errorf("caller keys %s: not a JWK Set: %w", c.source, err)
	}
	if len(set.Keys) == 0 {
		return fmt.Errorf("caller keys %s: no keys", c.source)
	}
	kf, err := keyfunc.NewJWKSetJSON(b)
	if err != nil {
		return fmt.Errorf("caller keys %s: %w", c.source, err)
	}
	c.keys.Store(&keySet{kf: kf, read: c.now()})
	return nil
}

func (c *callerCheck) fetch() ([]byte, error) {
	resp, err := c.client.Get(c.source)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", c.source, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes))
}

// refresh reads the keys again unless those held were read after since
// (another request read them meanwhile: it reports true) or the last
// attempt was less than reloadAfter ago; it reports whether the keys are
// newer than since.
func (c *callerCheck) refresh(since time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ks := c.keys.Load(); ks != nil && ks.read.After(since) {
		return true
	}
	if now := c.now(); !c.tried.IsZero() && now.Sub(c.tried) < c.reloadAfter {
		return false
	}
	return c.reload() == nil
}

// keyFor finds the key of an assertion: by its kid, reading the keys again
// (bounded) when they do not hold it.
func (c *callerCheck) keyFor(t *jwt.Token) (any, error) {
	if typ, _ := t.Header["typ"].(string); typ != wire.CallerAssertionType {
		return nil, fmt.Errorf("not a caller assertion (typ %q)", typ)
	}
	if kid, _ := t.Header["kid"].(string); kid == "" {
		return nil, errors.New("it names no key (kid)")
	}
	ks := c.keys.Load()
	if ks != nil && c.now().Sub(ks.read) > c.maxAge {
		c.refresh(ks.read)
		ks = c.keys.Load()
	}
	if ks != nil {
		if k, err := ks.kf.Keyfunc(t); err == nil {
			return k, nil
		}
	}
	var since time.Time
	if ks != nil {
		since = ks.read
	}
	if c.refresh(since) {
		if k, err := c.keys.Load().kf.Keyfunc(t); err == nil {
			return k, nil
		}
	}
	if c.keys.Load() == nil {
		return nil, fmt.Errorf("the gateway's keys (%s) could not be read yet", c.source)
	}
	return nil, fmt.Errorf("signed with a key (kid %q) the gateway's keys do not hold", t.Header["kid"])
}

// claims are wire.CallerClaims as jwt checks them.
type claims struct{ wire.CallerClaims }

func (c *claims) GetExpirationTime() (*jwt.NumericDate, error) { return numericDate(c.Expires), nil }
func (c *claims) GetIssuedAt() (*jwt.NumericDate, error)       { return numericDate(c.IssuedAt), nil }
func (c *claims) GetNotBefore() (*jwt.NumericDate, error)      { return nil, nil }
func (c *claims) GetIssuer() (string, error)                   { return c.Issuer, nil }
func (c *claims) GetSubject() (string, error)                  { return c.Subject, nil }
func (c *claims) GetAudience() (jwt.ClaimStrings, error) {
	if c.Audience == "" {
		return nil, nil
	}
	return jwt.ClaimStrings{c.Audience}, nil
}

func numericDate(unix int64) *jwt.NumericDate {
	if unix == 0 {
		return nil
	}
	return jwt.NewNumericDate(time.Unix(unix, 0))
}

// check returns the caller the assertion of request id asserts, or why
// it is refused.
func (c *callerCheck) check(assertion, id string) (*Caller, error) {
	if assertion == "" {
		return nil, errors.New("the request carries no caller assertion (" + wire.PropCaller + "): is the gateway started with --caller-key-file?")
	}
	var cl claims
	if _, err := c.parser.ParseWithClaims(assertion, &cl, c.keyFor); err != nil {
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			return nil, errors.New("the caller assertion has expired")
		case errors.Is(err, jwt.ErrTokenInvalidAudience):
			return nil, fmt.Errorf("the caller assertion is for another service (%q)", cl.Audience)
		case errors.Is(err, jwt.ErrTokenSignatureInvalid):
			return nil, errors.New("the caller assertion's signature does not verify")
		}
		return nil, fmt.Errorf("the caller assertion is not valid: %w", err)
	}
	if cl.ID != id {
		return nil, errors.New("the caller assertion is for another request (its jti is not the request's id)")
	}
	if cl.Subject == "" || cl.Tool == "" {
		return nil, errors.New("the caller assertion names no subject or no tool")
	}
	exp := time.Unix(cl.Expires, 0)
	switch c.seen.add(cl.ID, exp.Add(c.leeway), c.now()) {
	case seenBefore:
		return nil, errors.New("the caller assertion was used before (a replay)")
	case seenFull:
		return nil, errCallerBusy
	}
	return &Caller{Issuer: cl.Issuer, Subject: cl.Subject, Source: cl.Source, Roles: cl.Roles, Tool: cl.Tool, ToolSet: cl.ToolSet,
		Audience: cl.Audience, RequestID: cl.ID, IssuedAt: time.Unix(cl.IssuedAt, 0), Expires: exp}, nil
}

// seenIDs are the ids of the assertions taken, until they expire.
type seenIDs struct {
	mu    sync.Mutex
	ids   map[string]int64 // id → when it may be forgotten (Unix ns)
	swept int64
	max   int
}

func (s *seenIDs) init() { s.ids, s.max = make(map[string]int64), callerSeenMax }

type seenResult int

const (
	seenNew seenResult = iota
	seenBefore
	seenFull
)

func (s *seenIDs) add(id string, until, now time.Time) seenResult {
	n := now.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.ids[id]; ok && t > n {
		return seenBefore
	}
	if len(s.ids) >= s.max || n-s.swept > int64(30*time.Second) {
		for k, t := range s.ids {
			if t <= n {
				delete(s.ids, k)
			}
		}
		s.swept = n
		if len(s.ids) >= s.max {
			return seenFull
		}
	}
	s.ids[id] = until.UnixNano()
	return seenNew
}

// checkCallers sets the caller check up, with WithCallerJWKS: the
// assertions' audience is Config.ID or the request topic unless
// WithCallerAudience names others.
func (s *Service) checkCallers(o options) error {
	if o.callerJWKS == "" {
		if len(o.callerAud) > 0 || o.callerIss != "" {
			return errors.New("WithCallerAudience and WithCallerIssuer need WithCallerJWKS")
		}
		return nil
	}
	aud := o.callerAud
	if len(aud) == 0 {
		aud = []string{s.cfg.ID, s.reqTopic}
	}
	c, err := newCallerCheck(o.callerJWKS, aud, o.callerIss)
	if err != nil {
		return fmt.Errorf("WithCallerJWKS: %w", err)
	}
	if c.keys.Load() == nil {
		s.log.Warn("cannot read the gateway's caller keys yet; the first call reads them again", "source", o.callerJWKS)
	}
	s.caller = c
	return nil
}
