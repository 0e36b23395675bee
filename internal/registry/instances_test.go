package registry

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// clock is a settable time for the merger (withClock).
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newClockMerger(t *testing.T, opts ...MergerOption) (*Merger, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	m := NewMerger(nil, nil, append([]MergerOption{withClock(c.Now)}, opts...)...)
	t.Cleanup(m.Close)
	return m, c
}

// pass lets d go by on c in steps of a second, the announcements heard at
// each (as the source says every second while they are readable).
func pass(m *Merger, c *clock, d time.Duration) {
	for d > 0 {
		step := min(d, time.Second)
		c.add(step)
		d -= step
		m.Heard(OriginAnnouncement, c.Now())
	}
}

func mustApply(t *testing.T, m *Merger, u Update) {
	t.Helper()
	u.Origin = OriginAnnouncement
	if err := m.Apply(u); err != nil {
		t.Fatal(err)
	}
}

// served returns the id of the service serving tool name, "" when none.
func served(m *Merger, name string) string {
	if tl, ok := m.Registry().Snapshot().Tool(name); ok {
		return tl.Service.ID
	}
	return ""
}

// A service is served while any of its instances is: one withdrawing
// leaves the others serving it.
func TestInstancesServeWhileAnyIsLive(t *testing.T) {
	m, _ := newClockMerger(t)
	doc := announcement("echo-service", "echo")
	for _, inst := range []string{"a", "b", "c"} {
		mustApply(t, m, Update{Unit: "echo-service", Instance: inst, Lease: 10 * time.Second, Doc: doc})
	}
	v := m.Registry().Snapshot().Version
	for i, inst := range []string{"a", "b"} {
		mustApply(t, m, Update{Unit: "echo-service", Instance: inst})
		if got := served(m, "echo"); got != "echo-service" {
			t.Fatalf("after %d of 3 instances withdrew, echo is served by %q", i+1, got)
		}
	}
	if st := m.Status(); len(st) != 1 || st[0].Units != 1 || st[0].Instances != 1 {
		t.Fatalf("status %+v; want 1 unit, 1 instance", st)
	}
	// A renewal of the same document publishes nothing new.
	before := m.Registry().Snapshot().Version
	mustApply(t, m, Update{Unit: "echo-service", Instance: "c", Lease: 10 * time.Second, Doc: doc})
	if m.Registry().Snapshot().Version != before {
		t.Fatal("a renewal published a new snapshot")
	}
	mustApply(t, m, Update{Unit: "echo-service", Instance: "c"})
	snap := m.Registry().Snapshot()
	if _, ok := snap.Tool("echo"); ok {
		t.Fatal("echo still served after every instance withdrew")
	}
	if _, ok := snap.Gone("echo"); ok {
		t.Fatal("a withdrawn service's tool is reported gone (crashed), want simply not found")
	}
	if snap.Version <= v {
		t.Fatal("no new snapshot")
	}
	// Withdrawing an instance never seen changes nothing.
	mustApply(t, m, Update{Unit: "echo-service", Instance: "zzz"})

	// A withdrawal keyed by the service id alone removes every instance.
	for _, inst := range []string{"d", "e"} {
		mustApply(t, m, Update{Unit: "echo-service", Instance: inst, Lease: 10 * time.Second, Doc: doc})
	}
	mustApply(t, m, Update{Unit: "echo-service"})
	if got := served(m, "echo"); got != "" {
		t.Fatalf("after the service was withdrawn as a whole, echo is served by %q", got)
	}
}

// An instance whose lease runs out has left; when it was the last, the
// service's tools are gone (not listed, Gone), until an instance
// announces again.
func TestLeaseRunsOut(t *testing.T) {
	m, c := newClockMerger(t)
	doc := announcement("echo-service", "echo")
	mustApply(t, m, Update{Unit: "echo-service", Instance: "a", Lease: 10 * time.Second, Doc: doc})
	pass(m, c, 5*time.Second)
	mustApply(t, m, Update{Unit: "echo-service", Instance: "b", Lease: 10 * time.Second, Doc: doc})
	pass(m, c, 6*time.Second) // a ran out, b holds
	m.tick()
	if got := served(m, "echo"); got != "echo-service" {
		t.Fatalf("echo served by %q with instance b live", got)
	}
	mustApply(t, m, Update{Unit: "echo-service", Instance: "b", Lease: 10 * time.Second, Doc: doc}) // renewed at 11 s
	pass(m, c, 9*time.Second)
	m.tick()
	if got := served(m, "echo"); got != "echo-service" {
		t.Fatalf("echo served by %q with b's renewed lease", got)
	}
	pass(m, c, 2*time.Second)
	m.tick()
	snap := m.Registry().Snapshot()
	if _, ok := snap.Tool("echo"); ok || len(snap.Tools()) != 0 {
		t.Fatal("echo still listed after every lease ran out")
	}
	if tl, ok := snap.Gone("echo"); !ok || tl.Service.ID != "echo-service" {
		t.Fatalf("Gone(echo) = %+v, %v; want echo-service's tool", tl, ok)
	}
	if st := m.Status(); st[0].Units != 0 || st[0].Departed != 1 {
		t.Fatalf("status %+v; want 0 units, 1 departed", st)
	}
	// A new instance brings it back.
	mustApply(t, m, Update{Unit: "echo-service", Instance: "d", Lease: 10 * time.Second, Doc: doc})
	if got := served(m, "echo"); got != "echo-service" {
		t.Fatalf("echo served by %q after a new instance announced", got)
	}
	if _, ok := m.Registry().Snapshot().Gone("echo"); ok {
		t.Fatal("echo still gone")
	}
}

// An announcement read long after it was made (a gateway starting) counts
// from when it was made: a lease that ran out meanwhile makes the tool
// gone at once, and one whose claim grace is over too is ignored.
func TestLateAnnouncementRanOut(t *testing.T) {
	m, c := newClockMerger(t, WithClaimGrace(time.Minute))
	mustApply(t, m, Update{Unit: "older", Instance: "a", Lease: 10 * time.Second, At: c.Now().Add(-time.Hour), Doc: announcement("older", "older-tool")})
	mustApply(t, m, Update{Unit: "dead", Instance: "a", Lease: 10 * time.Second, At: c.Now().Add(-30 * time.Second), Doc: announcement("dead", "dead-tool")})
	mustApply(t, m, Update{Unit: "live", Instance: "a", Lease: 10 * time.Second, At: c.Now().Add(-5 * time.Second), Doc: announcement("live", "live-tool")})
	snap := m.Registry().Snapshot()
	if _, ok := snap.Gone("dead-tool"); !ok {
		t.Error("a tool whose lease ran out before it was read is not gone")
	}
	if _, ok := snap.Gone("older-tool"); ok {
		t.Error("a tool whose claim lapsed before it was read is still remembered")
	}
	if got := served(m, "live-tool"); got != "live" {
		t.Errorf("live-tool served by %q", got)
	}
	pass(m, c, 5*time.Second)
	m.tick()
	if _, ok := m.Registry().Snapshot().Gone("live-tool"); !ok {
		t.Error("live-tool not gone 10 s after it was announced")
	}
	pass(m, c, time.Minute)
	m.tick()
	if st := m.Status(); len(st) != 0 {
		t.Errorf("status %+v; want every claim lapsed", st)
	}
}

// A tool name refused to one service stays refused while its holder
// restarts (withdraws, then announces as a new instance) or crashes, for
// the claim grace; it is handed over when the grace is over, or at once
// for a service the operator released.
func TestClaimHeldAcrossRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []MergerOption
		released bool
	}{
		{"grace", []MergerOption{WithClaimGrace(time.Minute)}, false},
		{"released", []MergerOption{WithClaimGrace(time.Minute), WithReleasedClaims("joke-service")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, c := newClockMerger(t, tc.opts...)
			lease := 10 * time.Second
			mustApply(t, m, Update{Unit: "joke-service", Instance: "j1", Lease: lease, Doc: announcement("joke-service", "tell-joke")})
			mustApply(t, m, Update{Unit: "aaa-evil", Instance: "e1", Lease: lease, Doc: announcement("aaa-evil", "tell-joke")})
			if got := served(m, "tell-joke"); got != "joke-service" {
				t.Fatalf("tell-joke served by %q", got)
			}
			// The restart: withdraw, then a new instance announces.
			mustApply(t, m, Update{Unit: "joke-service", Instance: "j1"})
			got := served(m, "tell-joke")
			if tc.released {
				if got != "aaa-evil" {
					t.Fatalf("released: tell-joke served by %q after joke-service withdrew, want the hand-over", got)
				}
				return
			}
			if got != "" {
				t.Fatalf("during joke-service's restart tell-joke is served by %q", got)
			}
			pass(m, c, 3*time.Second)
			mustApply(t, m, Update{Unit: "aaa-evil", Instance: "e1", Lease: lease, Doc: announcement("aaa-evil", "tell-joke")})
			mustApply(t, m, Update{Unit: "joke-service", Instance: "j2", Lease: lease, Doc: announcement("joke-service", "tell-joke")})
			if got := served(m, "tell-joke"); got != "joke-service" {
				t.Fatalf("after joke-service's restart tell-joke is served by %q", got)
			}
			// A crash: its lease runs out while the claimant renews.
			for range 4 {
				pass(m, c, 4*time.Second)
				mustApply(t, m, Update{Unit: "aaa-evil", Instance: "e1", Lease: lease, Doc: announcement("aaa-evil", "tell-joke")})
				m.tick()
			}
			if got := served(m, "tell-joke"); got != "" {
				t.Fatalf("after joke-service crashed, tell-joke is served by %q", got)
			}
			if tl, ok := m.Registry().Snapshot().Gone("tell-joke"); !ok || tl.Service.ID != "joke-service" {
				t.Fatalf("Gone(tell-joke) = %+v, %v", tl, ok)
			}
			// The grace is over: the name is free.
			for range 16 {
				pass(m, c, 4*time.Second)
				mustApply(t, m, Update{Unit: "aaa-evil", Instance: "e1", Lease: lease, Doc: announcement("aaa-evil", "tell-joke")})
				m.tick()
			}
			if got := served(m, "tell-joke"); got != "aaa-evil" {
				t.Fatalf("after the claim grace tell-joke is served by %q, want aaa-evil", got)
			}
		})
	}
}

// With takeover on, renewals never move a contested name: the latest
// instance to start holds it.
func TestTakeoverNotByRenewal(t *testing.T) {
	m, _ := newClockMerger(t, WithAnnounceTakeover(true))
	lease := 10 * time.Second
	mustApply(t, m, Update{Unit: "first", Instance: "a", Lease: lease, Doc: announcement("first", "echo")})
	mustApply(t, m, Update{Unit: "second", Instance: "b", Lease: lease, Doc: announcement("second", "echo")})
	mustApply(t, m, Update{Unit: "first", Instance: "a", Lease: lease, Doc: announcement("first", "echo")})
	if got := served(m, "echo"); got != "second" {
		t.Fatalf("echo served by %q after first renewed; want second, which started last", got)
	}
	mustApply(t, m, Update{Unit: "first", Instance: "c", Lease: lease, Doc: announcement("first", "echo")})
	if got := served(m, "echo"); got != "first" {
		t.Fatalf("echo served by %q after a new instance of first; want first", got)
	}
}

// While the announcements are not heard (the broker unreachable),
// renewals cannot come: no lease runs out. Heard again, leases count by
// the log: a renewal made meanwhile keeps its instance, and one that did
// not renew has run out.
func TestLeasesHeldWhileUnheard(t *testing.T) {
	m, c := newClockMerger(t)
	lease := 10 * time.Second
	for _, id := range []string{"renews", "silent"} {
		mustApply(t, m, Update{Unit: id, Instance: "a", Lease: lease, Doc: announcement(id, id+"-tool")})
	}
	pass(m, c, 4*time.Second)
	c.add(time.Minute) // nothing heard
	m.tick()
	for _, id := range []string{"renews", "silent"} {
		if got := served(m, id+"-tool"); got != id {
			t.Fatalf("%s-tool served by %q while the announcements were not heard", id, got)
		}
	}
	// The reader is back: it reads the renewal made as the topic came
	// back, and hears.
	mustApply(t, m, Update{Unit: "renews", Instance: "a", Lease: lease, At: c.Now().Add(-time.Second), Doc: announcement("renews", "renews-tool")})
	m.Heard(OriginAnnouncement, c.Now())
	if got := served(m, "renews-tool"); got != "renews" {
		t.Fatalf("renews-tool served by %q after its renewal was read", got)
	}
	if _, ok := m.Registry().Snapshot().Gone("silent-tool"); !ok {
		t.Fatal("silent-tool not gone: its lease ran out and no renewal is in the log")
	}
}

// TestInstanceLostTold: an instance whose lease ran out is told, by the
// request topics it served, once; one that withdrew is not.
func TestInstanceLostTold(t *testing.T) {
	var mu sync.Mutex
	var told []string
	m, c := newClockMerger(t, WithInstanceLost(func(topic, inst string) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, topic+" "+inst)
	}))
	doc := announcement("echo-service", "echo")
	mustApply(t, m, Update{Unit: "echo-service", Instance: "a", Lease: 10 * time.Second, Doc: doc})
	mustApply(t, m, Update{Unit: "echo-service", Instance: "b", Lease: 10 * time.Second, Doc: doc})
	mustApply(t, m, Update{Unit: "echo-service", Instance: "c", Lease: 10 * time.Second, Doc: doc})
	mustApply(t, m, Update{Unit: "echo-service", Instance: "c"}) // withdrawn
	pass(m, c, 5*time.Second)
	mustApply(t, m, Update{Unit: "echo-service", Instance: "b", Lease: 10 * time.Second, Doc: doc})
	pass(m, c, 6*time.Second) // a ran out, b holds
	m.tick()
	mu.Lock()
	got := slices.Clone(told)
	mu.Unlock()
	topic := m.Registry().Snapshot().Services()[0].RequestTopic
	if want := []string{topic + " a"}; !slices.Equal(got, want) {
		t.Fatalf("told %q, want %q (a's lease ran out; b renewed; c withdrew)", got, want)
	}
}
