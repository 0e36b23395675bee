// Package limits bounds what callers may ask of the gateway: the request
// limits every door applies before any other work (Requests: body and
// message size after decompression, header size, body arrival time; HTTP
// for the HTTP listener, GRPCServerOptions and GRPCTap for the gRPC
// server), a per-caller token-bucket rate limit as a middleware every call
// passes through, whichever door it came by, and the REST error handler
// that answers the limits' refusals and turns a status's RetryInfo into a
// Retry-After header.
package limits

import (
	"container/list"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/toolcall"
	"golang.org/x/time/rate"
)

// Defaults of the Limiter's bounds.
const (
	DefaultMaxKeys     = 10000
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultBurst is the burst a gateway gives each user unless told
	// otherwise (New's burst).
	DefaultBurst = 20
)

// Limiter is a set of token buckets, one per key (the caller), each
// refilling at the same rate. Buckets unused for the idle timeout are
// dropped, and at most MaxKeys are kept: beyond that the least recently
// used bucket goes.
type Limiter struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	idle    time.Duration
	key     func(*toolcall.Call) string
	log     *slog.Logger
	now     func() time.Time

	mu      sync.Mutex
	lru     *list.List // of *bucket, most recently used first
	buckets map[string]*list.Element
}

type bucket struct {
	key  string
	lim  *rate.Limiter
	last time.Time
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithKey sets how a call names its bucket (default: its authenticated
// caller with the source of its identity, toolcall.Caller.Key, so the
// API-key user alice and a JWT naming alice have a bucket each; calls
// without a caller share the bucket "").
func WithKey(f func(*toolcall.Call) string) Option { return func(l *Limiter) { l.key = f } }

// WithMaxKeys bounds the number of buckets kept (default DefaultMaxKeys).
func WithMaxKeys(n int) Option { return func(l *Limiter) { l.maxKeys = n } }

// WithIdleTimeout drops buckets unused for d (default DefaultIdleTimeout;
// never less than the time an empty bucket takes to fill, so dropping one
// never grants more than waiting would).
func WithIdleTimeout(d time.Duration) Option { return func(l *Limiter) { l.idle = d } }

// WithLogger logs refused calls at debug level (default: discard).
func WithLogger(log *slog.Logger) Option { return func(l *Limiter) { l.log = log } }

// withClock is for tests.
func withClock(now func() time.Time) Option { return func(l *Limiter) { l.now = now } }

// callerKey is the bucket of c's caller.
func callerKey(c *toolcall.Call) string {
	if !c.Authenticated {
		return ""
	}
	return c.Caller.Key()
}

// New returns a Limiter allowing each key perSecond calls a second on
// average and bursts of up to burst calls. perSecond <= 0 means no limit.
func New(perSecond float64, burst int, opts ...Option) (*Limiter, error) {
	l := &Limiter{
		limit:   rate.Limit(perSecond),
		burst:   burst,
		maxKeys: DefaultMaxKeys,
		idle:    DefaultIdleTimeout,
		key:     callerKey,
		now:     time.Now,
		lru:     list.New(),
		buckets: map[string]*list.Element{},
	}
	for _, o := range opts {
		o(l)
	}
	if perSecond <= 0 || math.IsInf(perSecond, 1) {
		l.limit = rate.Inf
	}
	if l.limit != rate.Inf && burst < 1 {
		return nil, fmt.Errorf("limits: burst %d: want at least 1", burst)
	}
	if l.maxKeys < 1 {
		return nil, fmt.Errorf("limits: max keys %d: want at least 1", l.maxKeys)
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.limit != rate.Inf {
		if fill := time.Duration(float64(burst) / perSecond * float64(time.Second)); l.idle < fill {
			l.idle = fill
		}
	}
	return l, nil
}

// Allow takes a token from key's bucket. When the bucket is empty it
// takes nothing and returns how long until a token will be there.
func (l *Limiter) Allow(key string) (ok bool, retryAfter time.Duration) {
	if l.limit == rate.Inf {
		return true, 0
	}
	now := l.now()
	lim := l.bucket(key, now)
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// bucket finds or makes key's bucket, dropping idle ones and, when full,
// the least recently used.
func (l *Limiter) bucket(key string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	for e := l.lru.Back(); e != nil; e = l.lru.Back() {
		b := e.Value.(*bucket)
		if now.Sub(b.last) < l.idle {
			break
		}
		l.remove(e)
	}
	if e, ok := l.buckets[key]; ok {
		b := e.Value.(*bucket)
		b.last = now
		l.lru.MoveToFront(e)
		return b.lim
	}
	for len(l.buckets) >= l.maxKeys {
		l.remove(l.lru.Back())
	}
	b := &bucket{key: key, lim: rate.NewLimiter(l.limit, l.burst), last: now}
	l.buckets[key] = l.lru.PushFront(b)
	return b.lim
}

func (l *Limiter) remove(e *list.Element) {
	delete(l.buckets, e.Value.(*bucket).key)
	l.lru.Remove(e)
}

// Len is the number of buckets held.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
