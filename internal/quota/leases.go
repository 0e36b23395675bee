package quota

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// DefaultSlotLease is how long a slot is held past its take or its last
// renewal. A call renews its slots every DefaultSlotLease/3 while it
// runs; a slot nobody renews — its gateway died, or its take ran in a
// stalled Redis after its caller had given up — lapses by itself at most
// this long after.
const DefaultSlotLease = 15 * time.Second

const (
	// batchLeases bounds the leases renewed or released in one exchange.
	batchLeases = 512
	// maxPending bounds the leases whose release waits to be retried;
	// past it a lease is left to lapse.
	maxPending = 1 << 16
	// retryFirst and retryMost space the attempts of a release: from
	// the first, doubling, to the most.
	retryFirst = 250 * time.Millisecond
	retryMost  = time.Second
)

// leases keeps the slots of an Enforcer's calls: the leases of calls
// running, renewed by a heartbeat, and the releases that failed, retried
// until the store takes them. Each runs in a goroutine of its own while
// it has work, and ends when it has none.
type leases struct {
	store   Store
	lease   time.Duration // a slot's lease, past its take or last renewal
	maxHold time.Duration // the longest a call holds a slot
	log     *slog.Logger  // rate-limited
	failed  func()        // counts a failed exchange with the store

	mu        sync.Mutex
	live      map[string]dated // by lease: the calls running
	beating   bool             // the heartbeat runs
	pending   []dated          // the releases to retry, oldest first
	releasing bool             // the releaser runs
	retried   int              // pending releases taken since none was left
}

// dated is a lease held, or a release pending, since a time.
type dated struct {
	Held
	since time.Time
}

// hold notes a call's slots as held while it runs: the heartbeat renews
// them until end.
func (l *leases) hold(h Held) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live == nil {
		l.live = map[string]dated{}
	}
	l.live[h.Lease] = dated{Held: h, since: time.Now()}
	if !l.beating {
		l.beating = true
		go l.heartbeat()
	}
}

// end releases a call's slots once it has ended: at once, and when the
// store does not answer, again in the background until it does.
func (l *leases) end(ctx context.Context, h Held) {
	l.mu.Lock()
	delete(l.live, h.Lease)
	l.mu.Unlock()
	if err := l.store.Release(context.WithoutCancel(ctx), []Held{h}); err != nil {
		l.failed()
		l.log.WarnContext(ctx, "quota store: a call's slots were not released; retrying until the store answers", "err", err)
		l.retry(h)
	}
}

// retry releases h in the background until the store answers: a call
// whose release failed, or whose take got no answer — it may have
// reached Redis and run there, or may yet (queued in a stalled server's
// socket).
func (l *leases) retry(h Held) {
	l.mu.Lock()
	if len(l.pending) >= maxPending {
		l.mu.Unlock()
		l.log.Warn("quota store: too many slot releases waiting to be retried; the newest are left to lapse with their lease",
			"pending", maxPending, "lease", l.lease)
		return
	}
	l.pending = append(l.pending, dated{Held: h, since: time.Now()})
	if !l.releasing {
		l.releasing = true
		go l.releaser()
	}
	l.mu.Unlock()
}

// Pending is the number of releases waiting to be retried.
func (l *leases) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}

// heartbeat renews the leases of the calls running every lease/3, in one
// exchange a batch, until no call holds a slot. A call that has held its
// slots for maxHold is renewed no more: its slots lapse within a lease.
func (l *leases) heartbeat() {
	t := time.NewTicker(l.lease / 3)
	defer t.Stop()
	for range t.C {
		now := time.Now()
		l.mu.Lock()
		if len(l.live) == 0 {
			l.beating = false
			l.mu.Unlock()
			return
		}
		batch := make([]Held, 0, len(l.live))
		for _, r := range l.live {
			if now.Sub(r.since)+l.lease <= l.maxHold {
				batch = append(batch, r.Held)
			}
		}
		l.mu.Unlock()
		for b := range slices.Chunk(batch, batchLeases) {
			if err := l.store.Renew(context.Background(), b, l.lease); err != nil {
				l.failed()
				l.log.Warn("quota store: the slots of running calls were not renewed; they lapse unless a renewal reaches the store in time",
					"err", err, "calls", len(b), "lease", l.lease)
			}
		}
	}
}

// releaser retries the pending releases, a batch an exchange, waiting
// between failed attempts (retryFirst, doubling up to retryMost), until
// none is left. A release pending for maxHold is dropped: whatever it
// was for has lapsed, or cannot be told from a slot still held.
func (l *leases) releaser() {
	wait := retryFirst
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		<-timer.C
		l.mu.Lock()
		now := time.Now()
		drop := 0
		for drop < len(l.pending) && now.Sub(l.pending[drop].since) >= l.maxHold {
			drop++
		}
		l.pending = l.pending[drop:]
		if len(l.pending) == 0 {
			l.releasing, l.pending = false, nil
			l.mu.Unlock()
			return
		}
		n := min(len(l.pending), batchLeases)
		batch := make([]Held, n)
		for i, p := range l.pending[:n] {
			batch[i] = p.Held
		}
		l.mu.Unlock()
		err := l.store.Release(context.Background(), batch)
		l.mu.Lock()
		done, pending := 0, len(l.pending)
		if err == nil {
			l.pending = l.pending[n:]
			l.retried += n
			if pending = len(l.pending); pending == 0 {
				done, l.retried = l.retried, 0
			}
			wait = 0
		} else {
			wait = min(max(2*wait, retryFirst), retryMost)
		}
		l.mu.Unlock()
		switch {
		case err != nil:
			l.log.Warn("quota store: slot releases not taken; retrying", "err", err, "pending", pending, "in", wait)
		case done > 0:
			l.log.Info("quota store: slot releases retried: all taken", "releases", done)
		}
		timer.Reset(wait)
	}
}
