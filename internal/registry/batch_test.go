package registry

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// floodUpdates are n announcements of new services, as SDK instances.
func floodUpdates(prefix string, n int) []Update {
	us := make([]Update, n)
	for i := range us {
		id := fmt.Sprintf("%s%d", prefix, i)
		us[i] = Update{Origin: OriginAnnouncement, Unit: id, Instance: "x", Lease: 10 * time.Second, Doc: announcement(id, id+"-tool")}
	}
	return us
}

// A batch is applied as its updates would be one by one — each refusal
// its own — and publishes one snapshot.
func TestApplyBatchOneSnapshot(t *testing.T) {
	swaps := 0
	m := NewMerger(nil, func(*Snapshot) { swaps++ })
	t.Cleanup(m.Close)
	us := floodUpdates("s", 100)
	us[10].Doc = []byte(`{"tool-service": {}}`) // not its service: refused
	us[20].Lease = -time.Second                 // refused
	errs := m.ApplyBatch(us)
	for i, err := range errs {
		if wantErr := i == 10 || i == 20; (err != nil) != wantErr || (wantErr && !errors.Is(err, ErrRejected)) {
			t.Errorf("update %d: %v", i, err)
		}
	}
	if swaps != 1 {
		t.Errorf("%d snapshots published for one batch, want 1", swaps)
	}
	snap := m.Registry().Snapshot()
	if n := len(snap.Tools()); n != 98 {
		t.Errorf("%d tools served, want 98", n)
	}
	if got := m.Rejected(OriginAnnouncement); got != 2 {
		t.Errorf("%d rejected, want 2", got)
	}
	// Renewals only: nothing to publish.
	for i := range us {
		us[i].Doc = announcement(us[i].Unit, us[i].Unit+"-tool")
		us[i].Lease = 10 * time.Second
	}
	m.ApplyBatch(us[:5])
	if swaps != 1 {
		t.Errorf("renewals published a snapshot")
	}
}

// Updates of one unit in a batch apply in order, the last one winning,
// also when one of them is a renewal of what an earlier one withdrew.
func TestApplyBatchInOrder(t *testing.T) {
	m, _ := newClockMerger(t)
	doc := announcement("echo-service", "echo")
	mustApply(t, m, Update{Unit: "echo-service", Instance: "a", Lease: 10 * time.Second, Doc: doc})
	a := Update{Origin: OriginAnnouncement, Unit: "echo-service", Instance: "a", Lease: 10 * time.Second, Doc: doc}
	gone := Update{Origin: OriginAnnouncement, Unit: "echo-service", Instance: "a"}
	for _, tc := range []struct {
		batch  []Update
		served bool
	}{
		{[]Update{gone, a}, true},
		{[]Update{a, gone}, false},
		{[]Update{gone, a, gone, a}, true},
		{[]Update{a, gone, a, gone}, false},
	} {
		for _, err := range m.ApplyBatch(tc.batch) {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := served(m, "echo") != ""; got != tc.served {
			t.Fatalf("after %d updates echo served %v, want %v", len(tc.batch), got, tc.served)
		}
	}
}

// Renew renews an instance that announces its last document again, at
// once and without a new snapshot; anything else is left for Apply.
func TestRenew(t *testing.T) {
	m, c := newClockMerger(t)
	doc := announcement("echo-service", "echo")
	u := Update{Origin: OriginAnnouncement, Unit: "echo-service", Instance: "a", Lease: 10 * time.Second, Doc: doc}
	if m.Renew(u) {
		t.Fatal("an instance never announced was renewed")
	}
	mustApply(t, m, u)
	v := m.Registry().Snapshot().Version
	for i := range 3 {
		pass(m, c, 8*time.Second)
		if !m.Renew(u) {
			t.Fatalf("renewal %d not taken", i)
		}
		m.tick()
		if served(m, "echo") == "" {
			t.Fatalf("echo gone %v after its last renewal", 8*time.Second)
		}
	}
	if m.Registry().Snapshot().Version != v {
		t.Error("renewals published a snapshot")
	}
	for _, other := range []Update{
		{Origin: OriginAnnouncement, Unit: "echo-service", Instance: "b", Lease: 10 * time.Second, Doc: doc},              // another instance
		{Origin: OriginAnnouncement, Unit: "echo-service", Instance: "a", Lease: 10 * time.Second, Doc: append(doc, ' ')}, // another document
		{Origin: OriginAnnouncement, Unit: "echo-service", Instance: "a"},                                                 // a withdrawal
		{Origin: OriginAnnouncement, Unit: "echo-service", Instance: "a", Lease: -time.Second, Doc: doc},                  // a bad lease
	} {
		if m.Renew(other) {
			t.Errorf("Renew took %+v", other)
		}
	}
	pass(m, c, 10*time.Second)
	m.tick()
	if _, ok := m.Registry().Snapshot().Gone("echo"); !ok {
		t.Fatal("echo not gone a lease after its last renewal")
	}
}

// Known tells what the merger holds (updates that cost no new claim) from
// what is new.
func TestKnown(t *testing.T) {
	m, _ := newClockMerger(t)
	doc := announcement("echo-service", "echo")
	mustApply(t, m, Update{Unit: "echo-service", Instance: "a", Lease: 10 * time.Second, Doc: doc})
	for _, tc := range []struct {
		u    Update
		want bool
	}{
		{Update{Unit: "echo-service", Instance: "a", Doc: doc}, true},                                   // a renewal
		{Update{Unit: "echo-service", Instance: "a", Doc: announcement("echo-service", "other")}, true}, // a change of an instance held
		{Update{Unit: "echo-service", Instance: "b", Doc: doc}, true},                                   // another replica, same descriptors
		{Update{Unit: "echo-service", Instance: "b", Doc: announcement("echo-service", "other")}, false},
		{Update{Unit: "echo-service", Instance: "z"}, true}, // a withdrawal
		{Update{Unit: "new-service", Instance: "a", Doc: announcement("new-service", "new")}, false},
		{Update{Unit: "new-service", Instance: "a"}, false},
	} {
		tc.u.Origin = OriginAnnouncement
		if got := m.Known(tc.u); got != tc.want {
			t.Errorf("Known(%s@%s, %d bytes) = %v, want %v", tc.u.Unit, tc.u.Instance, len(tc.u.Doc), got, tc.want)
		}
	}
	// A departed service (its claims held) is known to a restart.
	mustApply(t, m, Update{Unit: "echo-service", Instance: "a"})
	if !m.Known(Update{Origin: OriginAnnouncement, Unit: "echo-service", Instance: "c", Doc: doc}) {
		t.Error("a restart of a departed service is not known")
	}
}

// The instances of every service together are bounded: one more is
// refused until another leaves.
func TestMaxAnnouncedInstances(t *testing.T) {
	m, _ := newClockMerger(t, WithMaxAnnouncedInstances(3))
	us := floodUpdates("s", 4)
	errs := m.ApplyBatch(us)
	if errs[3] == nil || !errors.Is(errs[3], ErrRejected) {
		t.Fatalf("the fourth instance: %v, want refused", errs[3])
	}
	if st := m.Status(); st[0].Instances != 3 || st[0].Rejected != 1 {
		t.Fatalf("status %+v", st)
	}
	// Another instance of a service there counts too.
	if err := m.Apply(Update{Origin: OriginAnnouncement, Unit: "s0", Instance: "y", Lease: 10 * time.Second, Doc: us[0].Doc}); err == nil {
		t.Fatal("a fourth instance of a service there admitted")
	}
	mustApply(t, m, Update{Unit: "s1", Instance: "x"}) // withdraws
	if err := m.Apply(us[3]); err != nil {
		t.Fatalf("once one withdrew: %v", err)
	}
	mustApply(t, m, Update{Unit: "s0"}) // every instance of s0
	if st := m.Status(); st[0].Instances != 2 {
		t.Fatalf("status %+v, want 2 instances", st)
	}
}

// Throttle counts refusals a source made as rejected and throttled.
func TestThrottle(t *testing.T) {
	m, _ := newClockMerger(t)
	m.Enable(OriginAnnouncement)
	m.Throttle(OriginAnnouncement, 3, errors.New("too many"))
	st := m.Status()
	if st[0].Rejected != 3 || st[0].Throttled != 3 || st[0].LastRejection != "too many" {
		t.Fatalf("status %+v", st)
	}
}

// BenchmarkFloodBatched applies 2,000 announcements of new services in
// batches of b (b = 1: one snapshot each, as before batches).
func BenchmarkFloodBatched(b *testing.B) {
	for _, size := range []int{1, 20, 1024} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			us := floodUpdates("s", 2000)
			for b.Loop() {
				m := NewMerger(nil, nil)
				for i := 0; i < len(us); i += size {
					m.ApplyBatch(us[i:min(i+size, len(us))])
				}
				m.Close()
			}
		})
	}
}
