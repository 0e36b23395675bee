package pulsarsrc

import (
	"sync"

	"github.com/toolgate/toolgate/internal/registry"
)

// largeDoc is the size from which an announcement is parsed in the lane
// for large ones, so that parsing it never holds up small ones.
const largeDoc = 64 << 10

// dispatcher applies announcements off the reader's goroutine, in two
// lanes (small and large documents), one worker each. Of the updates of
// one unit waiting, only the latest is applied, and never two of one unit
// at once, so the last message of each unit wins as it would in order.
// Bytes waiting in the large lane are bounded: beyond the bound submit
// waits for room.
type dispatcher struct {
	apply func(registry.Update)

	mu       sync.Mutex
	cond     *sync.Cond
	pending  map[string]registry.Update // latest update per unit (and instance), not started
	busy     map[string]bool            // units being applied
	queued   map[string]bool            // units in a lane's queue
	lanes    [2][]string                // 0: small, 1: large
	bigBytes int                        // bytes of large updates pending
	maxBig   int
	active   int // updates pending or being applied
	closed   bool
	wg       sync.WaitGroup
}

func newDispatcher(apply func(registry.Update), maxBigBytes int) *dispatcher {
	d := &dispatcher{apply: apply, pending: map[string]registry.Update{}, busy: map[string]bool{},
		queued: map[string]bool{}, maxBig: maxBigBytes}
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

// submit hands u over; a later update of the same unit replaces it if it
// has not started yet. It returns false once the dispatcher is closed.
func (d *dispatcher) submit(u registry.Update) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	big := laneOf(u) == 1
	for big && d.bigBytes > 0 && d.bigBytes+len(u.Doc) > d.maxBig && !d.closed {
		d.cond.Wait()
	}
	if d.closed {
		return false
	}
	k := unitKey(u)
	if old, ok := d.pending[k]; ok {
		if laneOf(old) == 1 {
			d.bigBytes -= len(old.Doc)
		}
		d.active--
	}
	d.pending[k] = u
	d.active++
	if big {
		d.bigBytes += len(u.Doc)
	}
	d.enqueueLocked(k)
	return true
}

// enqueueLocked puts a unit with a pending update in the lane of that
// update, unless it is queued already or being applied (it is queued again
// when that ends).
func (d *dispatcher) enqueueLocked(unit string) {
	if d.queued[unit] || d.busy[unit] {
		return
	}
	lane := laneOf(d.pending[unit])
	d.queued[unit] = true
	d.lanes[lane] = append(d.lanes[lane], unit)
	d.cond.Broadcast()
}

func (d *dispatcher) work(lane int) {
	defer d.wg.Done()
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		for len(d.lanes[lane]) == 0 && !d.closed {
			d.cond.Wait()
		}
		if d.closed {
			return
		}
		unit := d.lanes[lane][0]
		d.lanes[lane][0] = ""
		d.lanes[lane] = d.lanes[lane][1:]
		delete(d.queued, unit)
		u, ok := d.pending[unit]
		if !ok {
			continue
		}
		if laneOf(u) != lane { // replaced by one of the other lane's size
			d.enqueueLocked(unit)
			continue
		}
		delete(d.pending, unit)
		if lane == 1 {
			d.bigBytes -= len(u.Doc)
		}
		d.busy[unit] = true
		d.cond.Broadcast() // room in the large lane
		d.mu.Unlock()
		d.apply(u)
		d.mu.Lock()
		delete(d.busy, unit)
		d.active--
		if _, more := d.pending[unit]; more {
			d.enqueueLocked(unit)
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
	d.cond.Broadcast()
	d.mu.Unlock()
	d.wg.Wait()
}
