package quota

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/randid"
	"github.com/toolgate/toolgate/internal/redistest"
)

// stores are the Stores every contract test runs against: memory and the
// real Redis of make test.
func stores(t *testing.T) map[string]Store {
	t.Helper()
	r, err := NewRedis(redistest.Require(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return map[string]Store{"memory": NewMemory(), "redis": r}
}

// key is a key no other test run uses.
func key(name string) string { return "toolgate:test:" + randid.New() + ":" + name }

func TestStoreCounts(t *testing.T) {
	t.Parallel()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			a, b := Counter{Key: key("a"), Limit: 3, Window: time.Hour}, Counter{Key: key("b"), Limit: 5, Window: time.Hour}
			for i := range 3 {
				d, err := s.Take(ctx, Take{Counters: []Counter{a, b}})
				if err != nil || !d.OK {
					t.Fatalf("call %d: %+v, %v", i+1, d, err)
				}
			}
			d, err := s.Take(ctx, Take{Counters: []Counter{b, a}})
			if err != nil || d.OK || d.Refused != 1 {
				t.Fatalf("4th call: %+v, %v; want refused by a (index 1)", d, err)
			}
			if d.RetryAfter <= 0 || d.RetryAfter > time.Hour {
				t.Fatalf("retry after %v: want the rest of the hour's window", d.RetryAfter)
			}
			// A refused call counts nowhere: b has room for two more.
			for i := range 2 {
				if d, err := s.Take(ctx, Take{Counters: []Counter{b}}); err != nil || !d.OK {
					t.Fatalf("b alone, call %d: %+v, %v", i+1, d, err)
				}
			}
			if d, err := s.Take(ctx, Take{Counters: []Counter{b}}); err != nil || d.OK || d.Refused != 0 {
				t.Fatalf("b's 6th: %+v, %v; want refused", d, err)
			}
		})
	}
}

func TestStoreWindowEnds(t *testing.T) {
	t.Parallel()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := Counter{Key: key("w"), Limit: 1, Window: 300 * time.Millisecond}
			if d, err := s.Take(t.Context(), Take{Counters: []Counter{c}}); err != nil || !d.OK {
				t.Fatalf("first: %+v, %v", d, err)
			}
			if d, err := s.Take(t.Context(), Take{Counters: []Counter{c}}); err != nil || d.OK {
				t.Fatalf("second in the window: %+v, %v; want refused", d, err)
			}
			eventually.True(t, 10*time.Second, "a call is admitted once the window ended", func() bool {
				d, err := s.Take(t.Context(), Take{Counters: []Counter{c}})
				return err == nil && d.OK
			})
		})
	}
}

func TestStoreSlots(t *testing.T) {
	t.Parallel()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			sl := Slots{Key: key("s"), Limit: 2}
			take := func(lease string, d time.Duration) Decision {
				t.Helper()
				got, err := s.Take(ctx, Take{Slots: []Slots{sl}, Lease: lease, LeaseFor: d})
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			if !take("l1", time.Hour).OK || !take("l2", time.Hour).OK {
				t.Fatal("two slots of two: want both")
			}
			if d := take("l3", time.Hour); d.OK || d.Refused != 0 {
				t.Fatalf("third slot: %+v, want refused", d)
			}
			if err := s.Release(ctx, []Held{{Lease: "l1", Keys: []string{sl.Key}}}); err != nil {
				t.Fatal(err)
			}
			if !take("l3", 200*time.Millisecond).OK {
				t.Fatal("after a release: want a slot")
			}
			if take("l4", time.Hour).OK {
				t.Fatal("full again: want refused")
			}
			// l3 was never released: its lease lapses.
			eventually.True(t, 10*time.Second, "a slot whose lease lapsed is free again", func() bool {
				d, err := s.Take(ctx, Take{Slots: []Slots{sl}, Lease: "l5", LeaseFor: time.Hour})
				return err == nil && d.OK
			})
		})
	}
}

// TestStoreAllOrNothing: a call refused by its slots counts in no window.
func TestStoreAllOrNothing(t *testing.T) {
	t.Parallel()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			c, sl := Counter{Key: key("c"), Limit: 2, Window: time.Hour}, Slots{Key: key("s"), Limit: 1}
			both := Take{Counters: []Counter{c}, Slots: []Slots{sl}, Lease: "x", LeaseFor: time.Hour}
			if d, err := s.Take(ctx, both); err != nil || !d.OK {
				t.Fatalf("first: %+v, %v", d, err)
			}
			both.Lease = "y"
			if d, err := s.Take(ctx, both); err != nil || d.OK || d.Refused != 1 {
				t.Fatalf("second, slot held: %+v, %v; want refused by the slots (index 1)", d, err)
			}
			if d, err := s.Take(ctx, Take{Counters: []Counter{c}}); err != nil || !d.OK {
				t.Fatalf("the refused call was counted: %+v, %v", d, err)
			}
		})
	}
}

func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r, err := NewRedis(srv.URL, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := Take{Counters: []Counter{{Key: key("u"), Limit: 5, Window: time.Minute}}}
	if d, err := r.Take(t.Context(), c); err != nil || !d.OK {
		t.Fatalf("while up: %+v, %v", d, err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := r.Take(ctx, c); err == nil || errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		t.Fatalf("with Redis stopped: %v, want an error before the context's end", err)
	}
}

func TestMemorySweeps(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	m := NewMemory()
	m.now = func() time.Time { return now }
	for i := range 10 {
		if d, _ := m.Take(t.Context(), Take{Counters: []Counter{{Key: key("k"), Limit: 1, Window: time.Second}},
			Slots: []Slots{{Key: key("s"), Limit: 1}}, Lease: "l", LeaseFor: time.Second}); !d.OK {
			t.Fatalf("call %d refused", i)
		}
	}
	if m.Len() != 20 {
		t.Fatalf("held %d, want 20", m.Len())
	}
	now = now.Add(2 * sweepEvery)
	_, _ = m.Take(t.Context(), Take{})
	if m.Len() != 0 {
		t.Fatalf("held %d after every window and lease lapsed, want 0", m.Len())
	}
}

// TestStoreRenew: a renewed lease outlives its first term; a renewal
// never takes back a slot released; releasing what is not held is no
// error.
func TestStoreRenew(t *testing.T) {
	t.Parallel()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			const lease = 300 * time.Millisecond
			sl := Slots{Key: key("r"), Limit: 1}
			mine := Held{Lease: "l1", Keys: []string{sl.Key}}
			if d, err := s.Take(ctx, Take{Slots: []Slots{sl}, Lease: "l1", LeaseFor: lease}); err != nil || !d.OK {
				t.Fatalf("first: %+v, %v", d, err)
			}
			start := time.Now()
			eventually.True(t, 30*time.Second, "four leases pass with the slot renewed", func() bool {
				if err := s.Renew(ctx, []Held{mine}, lease); err != nil {
					t.Fatal(err)
				}
				if d, err := s.Take(ctx, Take{Slots: []Slots{sl}, Lease: "l2", LeaseFor: lease}); err != nil || d.OK {
					t.Fatalf("a second slot %v after the first was taken and renewed: %+v, %v; want refused", time.Since(start), d, err)
				}
				return time.Since(start) > 4*lease
			})
			for range 2 { // the second finds nothing
				if err := s.Release(ctx, []Held{mine}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Renew(ctx, []Held{mine}, time.Hour); err != nil {
				t.Fatal(err)
			}
			if d, err := s.Take(ctx, Take{Slots: []Slots{sl}, Lease: "l2", LeaseFor: time.Hour}); err != nil || !d.OK {
				t.Fatalf("after the release and a renewal: %+v, %v; want the slot free", d, err)
			}
			if err := s.Renew(ctx, nil, lease); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
