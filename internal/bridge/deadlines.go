package bridge

import (
	"context"
	"sync"
	"time"
)

// Calls' own deadlines (CallOptions.Deadline) are kept by one goroutine
// per bridge rather than by a timer per call: a call is filed under the
// tick its deadline falls in, and each tick the calls filed under it are
// ended with context.DeadlineExceeded, at most deadlineTick after their
// deadline, never before it. A timer per call, armed for each wait, cost
// a few hundred nanoseconds of every call's CPU and its memory while it
// was parked; filing one costs a lock and a slot in a bucket shared with
// the calls of the same tick.

// deadlineTick is the resolution of calls' deadlines.
const deadlineTick = 10 * time.Millisecond

// deadlineIdleTicks is how many ticks without a filed call the goroutine
// goes on ticking before it waits for the next one: calls one at a time
// do not wake it for each.
const deadlineIdleTicks = 100

// maxSpare bounds the emptied buckets kept for reuse, and spareCap the
// capacity of one kept.
const (
	maxSpare = 64
	spareCap = 4096
)

// bucket holds the calls filed under one tick: a call taken out leaves a
// nil in its place (moving another into it would touch that call's memory
// too). A bucket whose calls were all taken out starts again from its
// first place, and stays until its tick comes: calls one at a time file
// under the same one, with no look-up.
type bucket struct {
	tick  int64
	calls []*Call
	live  int // calls not taken out
}

// filing is where a call is filed: its bucket (nil: not filed) and its
// index there. Taking it out needs no look-up.
type filing struct {
	b   *bucket
	pos int
}

// tick is the tick the call is filed under (0: not filed).
func (f filing) tick() int64 {
	if f.b == nil {
		return 0
	}
	return f.b.tick
}

// deadlines are the filed calls, by tick: the Unix time of the end of the
// tick in deadlineTick units. A call's place (Call.dl) is guarded by mu.
type deadlines struct {
	mu    sync.Mutex
	ticks map[int64]*bucket
	last  *bucket   // the one filed in last: calls made together share it
	n     int       // calls filed
	swept int64     // the last tick whose calls were ended
	spare []*bucket // emptied buckets, reused for new ticks
	idle  bool      // the goroutine waits for wake
	wake  chan struct{}
}

func (d *deadlines) init() {
	d.ticks = map[int64]*bucket{}
	d.wake = make(chan struct{}, 1)
}

// tickOf is the tick whose end is the first at or after t.
func tickOf(t time.Time) int64 {
	return (t.UnixNano() + int64(deadlineTick) - 1) / int64(deadlineTick)
}

// file files c under its deadline's tick (the next one to be swept, if that
// passed already).
func (d *deadlines) file(c *Call) {
	k := tickOf(c.deadline)
	d.mu.Lock()
	k = max(k, d.swept+1)
	b := d.last
	if b == nil || b.tick != k {
		b = d.ticks[k]
	}
	if b == nil {
		if n := len(d.spare); n > 0 {
			b = d.spare[n-1]
			d.spare[n-1] = nil
			d.spare = d.spare[:n-1]
		} else {
			b = &bucket{}
		}
		b.tick = k
		d.ticks[k] = b
	}
	d.last = b
	c.dl = filing{b: b, pos: len(b.calls)}
	b.calls = append(b.calls, c)
	b.live++
	d.n++
	wake := d.idle
	d.idle = false
	d.mu.Unlock()
	if wake {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// unfile takes c out, if it is filed.
func (d *deadlines) unfile(c *Call) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := c.dl.b
	if b == nil {
		return
	}
	b.calls[c.dl.pos] = nil
	c.dl.b = nil
	d.n--
	if b.live--; b.live == 0 {
		b.calls = b.calls[:0] // all nil
	}
}

// drop forgets bucket b, and keeps it for a later tick. d.mu is held.
func (d *deadlines) drop(b *bucket) {
	delete(d.ticks, b.tick)
	if d.last == b {
		d.last = nil
	}
	clear(b.calls)
	b.calls, b.live = b.calls[:0], 0
	if len(d.spare) < maxSpare && cap(b.calls) <= spareCap {
		d.spare = append(d.spare, b)
	}
}

// due takes out the calls filed under ticks up to now, appending them to
// out.
func (d *deadlines) due(now int64, out []*Call) []*Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	take := func(k int64) {
		b, ok := d.ticks[k]
		if !ok {
			return
		}
		for _, c := range b.calls {
			if c != nil {
				c.dl.b = nil
				out = append(out, c)
			}
		}
		d.n -= b.live
		d.drop(b)
	}
	if now-d.swept > int64(len(d.ticks)) {
		// Fewer filed ticks than ticks to look at (after a wait): look
		// at those filed.
		for k := range d.ticks {
			if k <= now {
				take(k)
			}
		}
	} else {
		for k := d.swept + 1; k <= now; k++ {
			take(k)
		}
	}
	d.swept = max(d.swept, now)
	return out
}

// rest reports whether nothing is filed, and if so marks the goroutine
// idle: the next file wakes it.
func (d *deadlines) rest() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n > 0 {
		return false
	}
	d.idle = true
	return true
}

// expireCalls ends the calls whose deadline passed, each tick, until the
// bridge closes.
func (b *Bridge) expireCalls() {
	defer b.sweeps.Done()
	t := time.NewTimer(deadlineTick)
	defer t.Stop()
	var due []*Call
	empty := 0
	for {
		select {
		case <-b.closing:
			return
		case <-t.C:
		}
		due = b.deadlines.due(time.Now().UnixNano()/int64(deadlineTick), due[:0])
		for i, c := range due {
			c.finish(context.DeadlineExceeded)
			due[i] = nil
		}
		if empty++; len(due) > 0 {
			empty = 0
		}
		if empty >= deadlineIdleTicks {
			empty = 0
			if b.deadlines.rest() {
				select {
				case <-b.closing:
					return
				case <-b.deadlines.wake:
				}
			}
		}
		t.Reset(deadlineTick)
	}
}
