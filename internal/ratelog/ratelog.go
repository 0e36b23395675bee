// Package ratelog bounds how many lines a kind of event may write: a
// slog.Handler that passes the first record of each message in an
// interval and counts the rest, then writes one line with their count.
// What a client or a lost broker can make happen over and over (refused
// calls, abandoned streams, reconnect warnings) is logged through it, so
// nobody outside can write gigabytes of log.
package ratelog

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// DefaultInterval is how often each message may be written when
// NewHandler is given no interval.
const DefaultInterval = 5 * time.Second

// maxKinds bounds the messages tracked at once; messages are the code's
// own constant texts, so the bound is only a guard.
const maxKinds = 1024

// Handler passes on the first record of each message per interval; the
// others of that interval are counted, and when the interval ends a
// line with the message, the last record's attributes and
// "suppressed": the count is written. Records below the next handler's
// level cost nothing.
type Handler struct {
	next  slog.Handler
	state *state
}

type state struct {
	every time.Duration
	key   func(string) string // a record's kind, from its message
	now   func() time.Time
	mu    sync.Mutex
	kinds map[string]*kind
}

// kind is one message's interval.
type kind struct {
	start      time.Time
	suppressed int
	last       slog.Record  // the last record suppressed
	next       slog.Handler // the handler it would have gone to
	flushing   bool         // a flush is scheduled
}

// NewHandler rate-limits next: each message at most once per every
// (DefaultInterval when <= 0), plus one line with the count of those
// left out.
func NewHandler(next slog.Handler, every time.Duration) *Handler {
	if every <= 0 {
		every = DefaultInterval
	}
	return &Handler{next: next, state: &state{every: every, key: func(m string) string { return m }, now: time.Now, kinds: map[string]*kind{}}}
}

// NewHandlerByShape is NewHandler for messages that carry their details
// in their text (a log.Logger's lines: "http: TLS handshake error from
// 10.0.0.1:5123: EOF"): messages that differ only in their digits are one
// kind.
func NewHandlerByShape(next slog.Handler, every time.Duration) *Handler {
	h := NewHandler(next, every)
	h.state.key = withoutDigits
	return h
}

// withoutDigits is m without its decimal digits.
func withoutDigits(m string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, m)
}

// New is a logger over log's handler, rate-limited by NewHandler.
func New(log *slog.Logger, every time.Duration) *slog.Logger {
	return slog.New(NewHandler(log.Handler(), every))
}

// Enabled is the next handler's.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// WithAttrs and WithGroup share the intervals: the same message is one
// kind whatever attributes its logger carries.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(as), state: h.state}
}

// WithGroup is as WithAttrs: the intervals are shared.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), state: h.state}
}

// Handle writes r when its message had no line in the current interval,
// and counts it otherwise.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	s := h.state
	now := s.now()
	s.mu.Lock()
	key := s.key(r.Message)
	k, ok := s.kinds[key]
	if !ok || now.Sub(k.start) >= s.every {
		if !ok {
			if len(s.kinds) >= maxKinds {
				s.evict(now)
			}
			k = &kind{}
			s.kinds[key] = k
		}
		pending, n, next := k.last, k.suppressed, k.next
		k.start, k.suppressed, k.last, k.next = now, 0, slog.Record{}, nil
		s.mu.Unlock()
		if n > 0 {
			writeCount(ctx, next, pending, n)
		}
		return h.next.Handle(ctx, r)
	}
	k.suppressed++
	k.last, k.next = r.Clone(), h.next
	if !k.flushing {
		k.flushing = true
		time.AfterFunc(s.every-now.Sub(k.start), func() { s.flush(key) })
	}
	s.mu.Unlock()
	return nil
}

// flush writes the count of a kind's suppressed records, if any are
// left when its interval ends.
func (s *state) flush(key string) {
	s.mu.Lock()
	k, ok := s.kinds[key]
	if !ok {
		s.mu.Unlock()
		return
	}
	k.flushing = false
	pending, n, next := k.last, k.suppressed, k.next
	if n > 0 {
		// The count opens a new interval: the next record waits for it.
		k.start, k.suppressed, k.last, k.next = s.now(), 0, slog.Record{}, nil
	}
	s.mu.Unlock()
	if n > 0 {
		writeCount(context.Background(), next, pending, n)
	}
}

// evict drops the kinds whose interval is over and nothing waits in;
// if none is, it drops them all (their counts are lost, not their next
// lines).
func (s *state) evict(now time.Time) {
	for m, k := range s.kinds {
		if now.Sub(k.start) >= s.every && k.suppressed == 0 {
			delete(s.kinds, m)
		}
	}
	if len(s.kinds) >= maxKinds {
		clear(s.kinds)
	}
}

// writeCount writes the last suppressed record again with the number of
// records of its kind that were left out.
func writeCount(ctx context.Context, next slog.Handler, r slog.Record, n int) {
	r = r.Clone()
	r.AddAttrs(slog.Int("suppressed", n))
	_ = next.Handle(ctx, r)
}
