package quota

import (
	"context"
	"sync"
	"time"
)

// Counter is one window's count: at most Limit calls in a window of
// Window, the window starting at the first call counted.
type Counter struct {
	Key    string
	Limit  int
	Window time.Duration
}

// Slots is one bound of calls at once: at most Limit held in Key.
type Slots struct {
	Key   string
	Limit int
}

// Take is what one call asks of a Store: to be counted by every counter
// and to hold a slot, named Lease, in every set of slots — all of them
// or none.
type Take struct {
	Counters []Counter
	Slots    []Slots
	// Lease names the call's slots; they lapse LeaseFor after the take
	// (or their last renewal) unless released or renewed before.
	Lease    string
	LeaseFor time.Duration
}

// Held is a lease and the sets of slots it holds a slot in.
type Held struct {
	Lease string
	Keys  []string
}

// Decision is a Store's answer: the call was admitted (and counted, and
// holds its slots), or it was refused by the bound at Refused — an index
// into Counters, then Slots — with nothing changed, and may be admitted
// after RetryAfter (0: unknown, as for slots).
type Decision struct {
	OK         bool
	Refused    int
	RetryAfter time.Duration
}

// Store keeps the counts. Its methods are safe for concurrent use; an
// error means the store could not be asked (the Middleware then fails
// open or closed, as configured). Renew and Release may be asked again
// whatever became of an earlier attempt: a lease they do not find is no
// error.
type Store interface {
	Take(ctx context.Context, t Take) (Decision, error)
	// Renew extends each lease still held to d from now. A lease no
	// longer held (released, or lapsed and dropped) is not taken again.
	Renew(ctx context.Context, leases []Held, d time.Duration) error
	// Release gives back the leases' slots.
	Release(ctx context.Context, leases []Held) error
}

// Memory is a Store in this gateway's memory: the quotas of one replica.
// Counts whose window ended and empty slot sets are dropped as calls
// come.
type Memory struct {
	now func() time.Time

	mu        sync.Mutex
	counts    map[string]*window
	slots     map[string]map[string]time.Time // key → lease → until
	nextSweep time.Time
}

type window struct {
	n   int
	end time.Time
}

// sweepEvery is how often Memory drops what has lapsed.
const sweepEvery = time.Minute

// NewMemory returns an empty Memory store.
func NewMemory() *Memory {
	return &Memory{now: time.Now, counts: map[string]*window{}, slots: map[string]map[string]time.Time{}}
}

// Take implements Store.
func (m *Memory) Take(_ context.Context, t Take) (Decision, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.After(m.nextSweep) {
		m.sweep(now)
		m.nextSweep = now.Add(sweepEvery)
	}
	for i, c := range t.Counters {
		if w, ok := m.counts[c.Key]; ok && now.Before(w.end) && w.n >= c.Limit {
			return Decision{Refused: i, RetryAfter: w.end.Sub(now)}, nil
		}
	}
	for i, s := range t.Slots {
		held := 0
		for _, until := range m.slots[s.Key] {
			if now.Before(until) {
				held++
			}
		}
		if held >= s.Limit {
			return Decision{Refused: len(t.Counters) + i}, nil
		}
	}
	for _, c := range t.Counters {
		w, ok := m.counts[c.Key]
		if !ok || !now.Before(w.end) {
			w = &window{end: now.Add(c.Window)}
			m.counts[c.Key] = w
		}
		w.n++
	}
	for _, s := range t.Slots {
		set := m.slots[s.Key]
		if set == nil {
			set = map[string]time.Time{}
			m.slots[s.Key] = set
		}
		set[t.Lease] = now.Add(t.LeaseFor)
	}
	return Decision{OK: true}, nil
}

// Renew implements Store.
func (m *Memory) Renew(_ context.Context, leases []Held, d time.Duration) error {
	until := m.now().Add(d)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range leases {
		for _, k := range h.Keys {
			if _, ok := m.slots[k][h.Lease]; ok {
				m.slots[k][h.Lease] = until
			}
		}
	}
	return nil
}

// Release implements Store.
func (m *Memory) Release(_ context.Context, leases []Held) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range leases {
		for _, k := range h.Keys {
			if set := m.slots[k]; set != nil {
				delete(set, h.Lease)
				if len(set) == 0 {
					delete(m.slots, k)
				}
			}
		}
	}
	return nil
}

func (m *Memory) sweep(now time.Time) {
	for k, w := range m.counts {
		if !now.Before(w.end) {
			delete(m.counts, k)
		}
	}
	for k, set := range m.slots {
		for lease, until := range set {
			if !now.Before(until) {
				delete(set, lease)
			}
		}
		if len(set) == 0 {
			delete(m.slots, k)
		}
	}
}

// Len is the number of counts and slot sets held.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.counts) + len(m.slots)
}
