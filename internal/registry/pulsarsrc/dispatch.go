package pulsarsrc

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/registry"
)

// largeDoc is the size from which an announcement is parsed in the lane
// for large ones, so that parsing it never holds up small ones.
const largeDoc = 64 << 10

// Admission bounds how fast a source of announcements takes in
// announcements of new services or instances (anything the registry does
// not hold yet, registry.Merger.Known) once it has read what was on the
// topic: the topic is written by anyone who may announce, and each new
// one costs the gateway a place in the registry and a subscription to its
// response topic. Renewals, withdrawals and changes of what the registry
// holds are never held up by them.
type Admission struct {
	// PerSecond is how many are admitted a second, on average (default
	// DefaultNewPerSecond).
	PerSecond int
	// Burst is how many are admitted at once after a quiet while (default
	// DefaultNewBurst).
	Burst int
	// Waiting is how many may wait for their turn (default
	// DefaultMaxWaiting); beyond it a new one is refused and counted
	// (registry.Merger.Throttle). Its announcer, if it renews, is admitted
	// at a later renewal.
	Waiting int
}

// The default Admission: a burst of new services (make run's example
// services, a rolling update of many) is admitted at once, and a flood of
// them at 200 a second, with 1,000 waiting (5 s of admissions) and the
// rest refused.
const (
	DefaultNewPerSecond = 200
	DefaultNewBurst     = 200
	DefaultMaxWaiting   = 1000
)

func (a Admission) withDefaults() Admission {
	if a.PerSecond <= 0 {
		a.PerSecond = DefaultNewPerSecond
	}
	if a.Burst <= 0 {
		a.Burst = DefaultNewBurst
	}
	if a.Waiting <= 0 {
		a.Waiting = DefaultMaxWaiting
	}
	return a
}

// maxBatch bounds the updates applied at once, so that a batch's parsing
// (outside the registry's lock, but ahead of the batch's merge) stays
// short.
const maxBatch = 1024

// admitStep is the share of a second's admissions the dispatcher waits
// for before it admits new ones, when nothing else is to be applied: new
// ones arriving one by one cost at most ten snapshots a second.
const admitStep = 10

// Classes of updates: of what the registry holds (known) — applied first,
// never throttled — and new ones.
const (
	known = iota
	fresh
)

// ErrThrottled is why an announcement of a new service or instance is
// refused when more are waiting than the source admits.
var ErrThrottled = errors.New("more announcements of new services are waiting than admitted")

// item is one update waiting in the dispatcher.
type item struct {
	key         string
	u           registry.Update
	lane, class int
}

// dispatcher applies announcements off the reader's goroutine, in two
// lanes (small and large documents), one worker each, in batches (one
// snapshot for all the updates a worker finds waiting). Of the updates of
// one unit waiting, only the latest is applied, and never two of one unit
// at once, so the last message of each unit wins as it would in order;
// an announcement and a withdrawal of one unit are never merged so.
//
// Updates of what the registry holds go first; renewals of its instances
// are applied as they are submitted. Updates of new services or instances
// are admitted, once the reader has caught up (live), at the pace of
// Admission; beyond its Waiting, they are refused. Bytes waiting in the
// large lane are bounded: beyond the bound a new one is refused (live),
// anything else waits for room; so does a new one beyond Waiting while
// the reader catches up. One goroutine submits (the reader).
type dispatcher struct {
	apply  func([]registry.Update)
	renew  func(registry.Update) bool // nil: no renewal at once
	known  func(registry.Update) bool // nil: every update is known
	refuse func(registry.Update, error)
	adm    Admission
	now    func() time.Time

	mu       sync.Mutex
	cond     *sync.Cond
	pending  map[string]*item // latest update per unit (and instance), not started
	busy     map[string]bool  // units being applied
	lanes    [2][2][]*item    // [0 small, 1 large][class]; an item no longer pending is skipped
	bigBytes int              // bytes of large updates pending
	maxBig   int
	waiting  int // new ones pending
	active   int // updates pending or being applied
	live     bool
	tokens   float64 // admissions available (live)
	filledAt time.Time
	timer    *time.Timer // wakes the workers when admissions are due
	timerAt  time.Time
	closed   bool
	wg       sync.WaitGroup
}

// newDispatcher starts the workers; apply applies a batch, in order.
func newDispatcher(apply func([]registry.Update), maxBigBytes int) *dispatcher {
	d := &dispatcher{apply: apply, pending: map[string]*item{}, busy: map[string]bool{},
		maxBig: maxBigBytes, adm: Admission{}.withDefaults(), now: time.Now, refuse: func(registry.Update, error) {}}
	d.cond = sync.NewCond(&d.mu)
	for lane := range d.lanes {
		d.wg.Add(1)
		go d.work(lane)
	}
	return d
}

// unitKey is what the dispatcher orders updates by: the unit and, for an
// instance's announcement, the instance.
func unitKey(u registry.Update) string {
	if u.Instance == "" {
		return u.Unit
	}
	return u.Unit + "\x00" + u.Instance // never a unit of its own
}

func laneOf(u registry.Update) int {
	if len(u.Doc) >= largeDoc {
		return 1
	}
	return 0
}

func withdrawal(u registry.Update) bool { return u.Parsed == nil && len(u.Doc) == 0 }

// setLive says whether the reader has caught up: from then on new ones
// are admitted at Admission's pace, starting with a full burst.
func (d *dispatcher) setLive(live bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if live && !d.live {
		d.tokens, d.filledAt = float64(d.adm.Burst), d.now()
	}
	d.live = live
	d.cond.Broadcast()
}

// submit hands u over; a later update of the same unit replaces it if it
// has not started yet. A renewal of an instance the registry holds, with
// nothing of its unit waiting, is applied at once. It returns false once
// the dispatcher is closed.
func (d *dispatcher) submit(u registry.Update) bool {
	k := unitKey(u)
	d.mu.Lock()
	_, waits := d.pending[k]
	waits = waits || d.busy[k]
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return false
	}
	// Only this goroutine submits: nothing of k that does not wait now
	// can start before this update is submitted.
	if !waits && d.renew != nil && !withdrawal(u) && d.renew(u) {
		return true
	}
	class := known // withdrawals too: they cost no claim
	if d.known != nil && !d.known(u) {
		if withdrawal(u) && !waits {
			return true // withdraws what is not there: nothing to do
		}
		if !withdrawal(u) {
			class = fresh
		}
	}
	lane := laneOf(u)
	d.mu.Lock()
	defer d.mu.Unlock()
	// An instance announced and withdrawn (or withdrawn and announced
	// again) within one backlog: the second waits until the first has
	// started, so that both are applied, in order, as a gateway replaying
	// the log applies them (the first may hold or drop claims). A new one
	// waiting for its admission is replaced, as any update of it.
	for !d.closed {
		old := d.pending[k]
		if old == nil || old.class == fresh || withdrawal(old.u) == withdrawal(u) {
			break
		}
		d.cond.Wait()
	}
	if old := d.pending[k]; class == fresh && d.live && (old == nil || old.class != fresh) {
		// Room: Waiting, besides those the admissions due now take.
		d.refillLocked(d.now())
		var err error
		switch {
		case d.waiting >= d.adm.Waiting+int(d.tokens):
			err = fmt.Errorf("%w (%d)", ErrThrottled, d.waiting)
		case lane == 1 && d.bigBytes > 0 && d.bigBytes+len(u.Doc) > d.maxBig:
			err = fmt.Errorf("%w (%d bytes of large announcements)", ErrThrottled, d.bigBytes)
		}
		if err != nil {
			d.mu.Unlock()
			d.refuse(u, err)
			d.mu.Lock()
			return !d.closed
		}
	}
	// What is not refused waits for room: bytes in the large lane, and
	// while catching up, new ones beyond Waiting (read faster than
	// applied, they would otherwise pile up).
	for !d.closed && ((lane == 1 && d.bigBytes > 0 && d.bigBytes+len(u.Doc) > d.maxBig) ||
		(class == fresh && !d.live && d.waiting >= d.adm.Waiting && d.pending[k] == nil)) {
		d.cond.Wait()
	}
	if d.closed {
		return false
	}
	old := d.pending[k]
	if old != nil {
		d.dropLocked(old)
	}
	it := &item{key: k, u: u, lane: lane, class: class}
	d.pending[k] = it
	d.active++
	if class == fresh {
		d.waiting++
	}
	if lane == 1 {
		d.bigBytes += len(u.Doc)
	}
	d.cond.Broadcast()
	if d.busy[k] {
		return true // queued when the one being applied is done
	}
	if old != nil && old.lane == lane && old.class == class {
		// In its predecessor's place in the queue.
		q := d.lanes[lane][class]
		for i := range q {
			if q[i] == old {
				q[i] = it
				return true
			}
		}
	}
	d.lanes[lane][class] = append(d.lanes[lane][class], it)
	return true
}

// dropLocked forgets a pending item (replaced, or started).
func (d *dispatcher) dropLocked(it *item) {
	delete(d.pending, it.key)
	d.active--
	if it.class == fresh {
		d.waiting--
	}
	if it.lane == 1 {
		d.bigBytes -= len(it.u.Doc)
	}
}

// refill adds the admissions due since the last refill.
func (d *dispatcher) refillLocked(now time.Time) {
	if el := now.Sub(d.filledAt); el > 0 {
		d.tokens = min(float64(d.adm.Burst), d.tokens+el.Seconds()*float64(d.adm.PerSecond))
		d.filledAt = now
	}
}

// wakeLocked has the workers woken after dt (admissions due).
func (d *dispatcher) wakeLocked(dt time.Duration) {
	at := d.now().Add(dt)
	if !d.timerAt.IsZero() && !at.Before(d.timerAt) {
		return
	}
	d.timerAt = at
	if d.timer == nil {
		d.timer = time.AfterFunc(dt, func() {
			d.mu.Lock()
			d.timerAt = time.Time{}
			d.cond.Broadcast()
			d.mu.Unlock()
		})
		return
	}
	d.timer.Reset(dt)
}

// takeLocked pops up to n items of a lane's queue that are still pending.
func (d *dispatcher) takeLocked(lane, class, n int, into []*item) []*item {
	q := d.lanes[lane][class]
	i := 0
	for ; i < len(q) && n > 0; i++ {
		it := q[i]
		q[i] = nil
		if d.pending[it.key] != it {
			continue // replaced, in another queue
		}
		into = append(into, it)
		n--
	}
	d.lanes[lane][class] = q[i:]
	return into
}

// queuedLocked counts the items of a lane's queue that are still pending.
func (d *dispatcher) queuedLocked(lane, class int) int {
	n := 0
	for _, it := range d.lanes[lane][class] {
		if d.pending[it.key] == it {
			n++
		}
	}
	return n
}

// next waits for the next batch of a lane: what the registry holds first,
// then new ones as admitted. It returns nil once the dispatcher is closed.
func (d *dispatcher) nextLocked(lane int) []*item {
	for !d.closed {
		batch := d.takeLocked(lane, known, maxBatch, nil)
		room := maxBatch - len(batch)
		if !d.live {
			batch = d.takeLocked(lane, fresh, room, batch)
		} else if room > 0 && len(d.lanes[lane][fresh]) > 0 {
			d.refillLocked(d.now())
			queued := d.queuedLocked(lane, fresh)
			step := min(queued, max(1, d.adm.PerSecond/admitStep), room)
			n := min(int(d.tokens), room)
			if n >= step || (n > 0 && len(batch) > 0) {
				before := len(batch)
				batch = d.takeLocked(lane, fresh, n, batch)
				d.tokens -= float64(len(batch) - before)
			} else if queued > 0 && len(batch) == 0 {
				d.wakeLocked(time.Duration((float64(step) - d.tokens) / float64(d.adm.PerSecond) * float64(time.Second)))
			}
		}
		if len(batch) > 0 {
			return batch
		}
		d.cond.Wait()
	}
	return nil
}

func (d *dispatcher) work(lane int) {
	defer d.wg.Done()
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		batch := d.nextLocked(lane)
		if batch == nil {
			return
		}
		us := make([]registry.Update, len(batch))
		for i, it := range batch {
			d.dropLocked(it)
			d.active++ // until applied
			d.busy[it.key] = true
			us[i] = it.u
		}
		d.cond.Broadcast() // room in the large lane, fewer waiting
		d.mu.Unlock()
		d.apply(us)
		d.mu.Lock()
		for _, it := range batch {
			delete(d.busy, it.key)
			d.active--
			if next := d.pending[it.key]; next != nil {
				d.lanes[next.lane][next.class] = append(d.lanes[next.lane][next.class], next)
			}
		}
		d.cond.Broadcast()
	}
}

// idle waits until every update submitted so far has been applied, or the
// dispatcher is closed.
func (d *dispatcher) idle() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.active > 0 && !d.closed {
		d.cond.Wait()
	}
}

// close stops the workers once the updates being applied are done; those
// still pending are dropped.
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.cond.Broadcast()
	d.mu.Unlock()
	d.wg.Wait()
}
