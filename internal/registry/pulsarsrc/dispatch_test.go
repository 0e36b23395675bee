package pulsarsrc

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/registry"
)

// each applies a batch one update at a time.
func each(f func(registry.Update)) func([]registry.Update) {
	return func(us []registry.Update) {
		for _, u := range us {
			f(u)
		}
	}
}

// A large announcement being parsed does not hold up a small one: the
// small one is applied while the large one's parse is still blocked.
func TestDispatcherLargeDoesNotHoldUpSmall(t *testing.T) {
	release := make(chan struct{})
	applied := make(chan string, 10)
	d := newDispatcher(each(func(u registry.Update) {
		if len(u.Doc) >= largeDoc {
			<-release
		}
		applied <- u.Unit
	}), 1<<30)
	defer d.close()
	d.submit(registry.Update{Unit: "big", Doc: []byte(strings.Repeat("x", largeDoc))})
	d.submit(registry.Update{Unit: "small", Doc: []byte("{}")})
	select {
	case u := <-applied:
		if u != "small" {
			t.Fatalf("applied %s first", u)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the small announcement waited for the large one")
	}
	close(release)
	if u := <-applied; u != "big" {
		t.Fatalf("applied %s, want big", u)
	}
	d.idle()
}

// Of the updates of one unit, the last one submitted is the one that ends
// applied, whatever the lanes, and two of one unit never run at once.
func TestDispatcherLastUpdateOfAUnitWins(t *testing.T) {
	var mu sync.Mutex
	last := map[string]string{}
	running := map[string]bool{}
	d := newDispatcher(each(func(u registry.Update) {
		mu.Lock()
		if running[u.Unit] {
			mu.Unlock()
			t.Errorf("two updates of %s at once", u.Unit)
			return
		}
		running[u.Unit] = true
		mu.Unlock()
		for range len(u.Doc) % 3 { // some updates take longer: let others run meanwhile
			runtime.Gosched()
		}
		mu.Lock()
		last[u.Unit] = string(u.Doc)
		running[u.Unit] = false
		mu.Unlock()
	}), 4*largeDoc)
	defer d.close()
	want := map[string]string{}
	for i := range 500 {
		unit := fmt.Sprintf("s%d", i%7)
		doc := fmt.Sprintf("%d", i)
		if i%5 == 0 {
			doc += strings.Repeat(" ", largeDoc) // the large lane
		}
		if i%11 == 0 {
			doc = "" // a withdrawal
		}
		want[unit] = doc
		d.submit(registry.Update{Unit: unit, Doc: []byte(doc)})
	}
	d.idle()
	mu.Lock()
	defer mu.Unlock()
	for unit, doc := range want {
		if last[unit] != doc {
			t.Errorf("%s ends with %.10q, want %.10q", unit, last[unit], doc)
		}
	}
}

// recorded is a dispatcher's apply that records the batches.
type recorded struct {
	mu      sync.Mutex
	batches [][]string // units, batch by batch
	units   map[string]bool
}

func (r *recorded) apply(us []registry.Update) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b []string
	for _, u := range us {
		b = append(b, u.Unit)
		r.units[u.Unit] = true
	}
	r.batches = append(r.batches, b)
}

func (r *recorded) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.units)
}

func (r *recorded) has(unit string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.units[unit]
}

// newTestDispatcher is a live dispatcher whose registry holds the units
// named "known…".
func newTestDispatcher(t *testing.T, adm Admission, refused *atomic.Int64) (*dispatcher, *recorded) {
	t.Helper()
	r := &recorded{units: map[string]bool{}}
	d := newDispatcher(r.apply, 1<<20)
	d.adm = adm.withDefaults()
	d.known = func(u registry.Update) bool { return strings.HasPrefix(u.Unit, "known") }
	d.refuse = func(registry.Update, error) { refused.Add(1) }
	d.setLive(true)
	t.Cleanup(d.close)
	return d, r
}

func doc(unit string) registry.Update { return registry.Update{Unit: unit, Doc: []byte("{}")} }

// Once live, new units are admitted at the admission's pace — a burst at
// once, the rest as admissions come due, never more than a burst in one
// batch — and those beyond the room to wait are refused; updates of known
// units are never held up by them.
func TestDispatcherAdmission(t *testing.T) {
	var refused atomic.Int64
	adm := Admission{PerSecond: 20, Burst: 10, Waiting: 20}
	d, r := newTestDispatcher(t, adm, &refused)
	for i := range 100 {
		d.submit(doc(fmt.Sprintf("new%d", i)))
	}
	if n := refused.Load(); n != 70 {
		t.Fatalf("%d refused, want 70 (100 - a burst of 10 - 20 waiting)", n)
	}
	eventually.True(t, 10*time.Second, "the burst admitted", func() bool { return r.count() >= 10 })
	d.submit(doc("known0"))
	eventually.True(t, 10*time.Second, "the known unit applied", func() bool { return r.has("known0") })
	if n := r.count(); n == 31 {
		t.Error("the known unit was applied after every new one waiting (a second of admissions)")
	}
	took := eventually.True(t, 10*time.Second, "the waiting ones admitted", func() bool { return r.count() == 31 })
	d.idle()
	if took < 500*time.Millisecond {
		t.Errorf("20 waiting admitted in %v at 20 a second", took)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.batches {
		fresh := 0
		for _, u := range b {
			if strings.HasPrefix(u, "new") {
				fresh++
			}
		}
		if fresh > adm.Burst {
			t.Errorf("a batch of %d new ones, more than a burst: %v", fresh, b)
		}
	}
}

// Before the reader has caught up, nothing is throttled: what was on the
// topic is taken in as fast as it is applied.
func TestDispatcherCatchUpNotThrottled(t *testing.T) {
	var refused atomic.Int64
	d, r := newTestDispatcher(t, Admission{PerSecond: 1, Burst: 1, Waiting: 1}, &refused)
	d.setLive(false)
	for i := range 3000 {
		d.submit(doc(fmt.Sprintf("new%d", i)))
	}
	d.idle()
	if r.count() != 3000 || refused.Load() != 0 {
		t.Fatalf("%d applied, %d refused; want all applied", r.count(), refused.Load())
	}
}

// A renewal the registry takes is applied as it is submitted, never
// queued; one of a unit with an update waiting is queued after it, so
// the last one still wins.
func TestDispatcherRenewsAtOnce(t *testing.T) {
	var refused atomic.Int64
	d, r := newTestDispatcher(t, Admission{}, &refused)
	var renewed atomic.Int64
	release := make(chan struct{})
	d.apply = func(us []registry.Update) {
		if us[0].Unit == "known-slow" {
			<-release
		}
		r.apply(us)
	}
	d.renew = func(u registry.Update) bool {
		if strings.HasPrefix(u.Unit, "known") {
			renewed.Add(1)
			return true
		}
		return false
	}
	d.submit(registry.Update{Unit: "known-slow"}) // a withdrawal: queued, held up
	eventually.True(t, 10*time.Second, "the slow update started", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.busy["known-slow"]
	})
	d.submit(doc("known-a")) // renewed at once
	if renewed.Load() != 1 {
		t.Fatalf("%d renewed at once, want 1", renewed.Load())
	}
	d.submit(doc("known-slow")) // its unit is being applied: queued after it
	if renewed.Load() != 1 {
		t.Fatal("a renewal of a unit being applied was taken before it")
	}
	close(release)
	d.idle()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.batches) != 2 || r.batches[1][0] != "known-slow" || r.units["known-a"] {
		t.Fatalf("batches %v", r.batches)
	}
}

// A withdrawal of a unit neither held nor waiting is dropped; one of a
// new unit waiting replaces it, and is never refused.
func TestDispatcherWithdrawals(t *testing.T) {
	var refused atomic.Int64
	d, r := newTestDispatcher(t, Admission{PerSecond: 1, Burst: 1, Waiting: 1}, &refused)
	d.submit(doc("new0")) // the burst
	eventually.True(t, 10*time.Second, "new0 applied", func() bool { return r.has("new0") })
	d.submit(doc("new1")) // waits
	d.submit(registry.Update{Unit: "new2"})
	d.submit(registry.Update{Unit: "new1"}) // replaces it
	if refused.Load() != 0 {
		t.Fatalf("%d refused", refused.Load())
	}
	d.idle()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.units) != 2 || !r.units["new0"] || !r.units["new1"] {
		t.Fatalf("applied %v, want new0 and new1's withdrawal", r.batches)
	}
}

// While catching up, the reader waits when Waiting new ones are there:
// nothing is refused, and what waits stays bounded.
func TestDispatcherCatchUpBounded(t *testing.T) {
	var refused atomic.Int64
	d, r := newTestDispatcher(t, Admission{Waiting: 5}, &refused)
	d.setLive(false)
	release := make(chan struct{})
	let := sync.OnceFunc(func() { close(release) })
	t.Cleanup(let) // before the dispatcher's close, which waits for apply
	d.apply = func(us []registry.Update) {
		<-release
		r.apply(us)
	}
	submitted := make(chan int, 100)
	go func() {
		for i := range 20 {
			d.submit(doc(fmt.Sprintf("new%d", i)))
			submitted <- i
		}
		close(submitted)
	}()
	// One batch taken and held up, five waiting: the sixth submit waits.
	held := 0
	eventually.True(t, 10*time.Second, "the reader held up", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		held = d.waiting + len(d.busy)
		return d.waiting == 5 && len(d.busy) > 0
	})
	if n := len(submitted); n > held {
		t.Fatalf("%d submitted while the dispatcher held %d", n, held)
	}
	let()
	for range submitted {
	}
	d.idle()
	if r.count() != 20 || refused.Load() != 0 {
		t.Fatalf("%d applied, %d refused", r.count(), refused.Load())
	}
}
