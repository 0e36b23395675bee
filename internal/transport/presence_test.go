package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
)

// admin is a ConsumerSource: cached is what its cache answers, consumers
// what it finds when asked now; a question waits while gate is set.
type admin struct {
	mu        sync.Mutex
	cached    bool
	consumers int
	err       error
	gate      chan struct{}
	asked     atomic.Int64 // questions asked now
	inFlight  atomic.Int64
	most      atomic.Int64 // the most questions under way at once
	askedFor  []string
}

func (a *admin) Subscribed(context.Context, string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cached, nil
}

func (a *admin) Consumers(ctx context.Context, topic string) ([]Consumer, error) {
	a.asked.Add(1)
	n := a.inFlight.Add(1)
	defer a.inFlight.Add(-1)
	for m := a.most.Load(); n > m && !a.most.CompareAndSwap(m, n); m = a.most.Load() {
	}
	a.mu.Lock()
	gate := a.gate
	a.askedFor = append(a.askedFor, topic)
	a.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return nil, a.err
	}
	return make([]Consumer, a.consumers), nil
}

func (a *admin) set(f func(*admin)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

// A call is refused only when the topic is found without a consumer now:
// a cached "none" is asked again, and a consumer found then serves the
// call; a cached "yes" is not asked again.
func TestPresenceAsksAgainBeforeRefusing(t *testing.T) {
	t.Parallel()
	a := &admin{}
	p := NewPresence(a, time.Minute)
	if ok, err := p.Subscribed(t.Context(), "t"); ok || err != nil {
		t.Fatalf("no consumer, cached or now: %v %v, want false", ok, err)
	}
	a.set(func(a *admin) { a.consumers = 1 }) // a service subscribed; the cache does not know yet
	if ok, err := p.Subscribed(t.Context(), "t"); !ok || err != nil {
		t.Fatalf("a consumer the cache does not know yet: %v %v, want true", ok, err)
	}
	a.set(func(a *admin) { a.cached = true })
	before := a.asked.Load()
	if ok, err := p.Subscribed(t.Context(), "t"); !ok || err != nil || a.asked.Load() != before {
		t.Fatalf("a cached yes: %v %v, %d questions asked, want true from the cache", ok, err, a.asked.Load()-before)
	}
}

// Calls to a topic found without consumers share the questions: one at a
// time, each answering the calls that came before it started.
func TestPresenceSharesItsQuestions(t *testing.T) {
	t.Parallel()
	a := &admin{gate: make(chan struct{})}
	p := NewPresence(a, time.Minute)
	const calls = 50
	answers := make(chan bool, calls)
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			ok, _ := p.Subscribed(t.Context(), "t")
			answers <- ok
		})
	}
	eventually.True(t, 10*time.Second, "a question under way", func() bool { return a.inFlight.Load() == 1 })
	// Every call waits for a question before the first is answered (under
	// load some goroutines start late; a call made after the answer asks
	// anew, as it should).
	eventually.True(t, 10*time.Second, "every call waiting", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.joined == calls
	})
	a.set(func(a *admin) { close(a.gate); a.gate = nil })
	wg.Wait()
	close(answers)
	for ok := range answers {
		if ok {
			t.Fatal("a call answered yes for a topic without consumers")
		}
	}
	if n, most := a.asked.Load(), a.most.Load(); n > 2 || most != 1 {
		t.Fatalf("%d calls asked %d questions, %d at once; want at most 2, one at a time", calls, n, most)
	}
}

// A question that is not answered in time, or fails, lets the call go
// ahead with the reason, as when the admin interface cannot answer.
func TestPresenceGoesAheadWithoutAnAnswer(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	defer close(gate)
	a := &admin{gate: gate}
	p := NewPresence(a, 50*time.Millisecond)
	start := time.Now()
	if ok, err := p.Subscribed(t.Context(), "t"); !ok || err == nil {
		t.Fatalf("a question not answered: %v %v, want true with the reason", ok, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the call waited %v for a question bounded by 50 ms", took)
	}
	failing := errors.New("admin API down")
	b := &admin{err: failing}
	if ok, err := NewPresence(b, 0).Subscribed(t.Context(), "t"); !ok || !errors.Is(err, failing) {
		t.Fatalf("a question that failed: %v %v, want true with its error", ok, err)
	}
}

// Learn asks about every topic and returns once each is answered, with
// the failures.
func TestPresenceLearn(t *testing.T) {
	t.Parallel()
	a := &admin{consumers: 1}
	p := NewPresence(a, 0)
	topics := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	if err := p.Learn(t.Context(), topics); err != nil {
		t.Fatal(err)
	}
	if n := a.asked.Load(); n != int64(len(topics)) {
		t.Fatalf("Learn asked %d questions about %d topics", n, len(topics))
	}
	a.set(func(a *admin) { a.err = errors.New("admin API down") })
	if err := p.Learn(t.Context(), []string{"x"}); err == nil {
		t.Fatal("Learn with the admin API down: no error")
	}
}
