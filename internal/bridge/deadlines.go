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
//
// The same goroutine, by the same ticks, keeps the calls watched for
// silence (hedge.go): a call that asked for a receipt is filed, in a
// second wheel, under the tick its silence would become long enough to
// publish it again. Both are filed, and taken out, under one lock.

// deadlineTick is the resolution of calls' deadlines.
const deadlineTick = 10 * time.Millisecond

// deadlineIdleTicks is how many ticks without a filed call the goroutine
// goes on ticking before it waits for the next one: calls one at a time
// do not wake it for each.
const deadlineIdleTicks = 100

// The wheels: a call's place in each is Call.place(wheel).
const (
	dlWheel    = 0 // the calls' own deadlines
	hedgeWheel = 1 // when a silent call is published again (hedge.go)
	wheels     = 2
)

// maxSpare bounds the emptied buckets kept for reuse, and spareCap the
// capacity of one kept.
const (
	maxSpare = 64
	spareCap = 4096
)

// bucket holds the calls filed in one wheel under one tick: a call taken
// out leaves a nil in its place (moving another into it would touch that
// call's memory too). A bucket whose calls were all taken out starts
// again from its first place, and stays until its tick comes: calls one
// at a time file under the same one, with no look-up.
type bucket struct {
	tick  int64
	calls []*Call
	live  int // calls not taken out
}

// filing is where a call is filed in one wheel: its bucket (nil: not
// filed) and its index there. Taking it out needs no look-up.
type filing struct {
	b   *bucket
	pos int
}

// place is where c is filed in wheel i (Call.dl, receiptState.hedge); nil
// for the hedges' wheel of a call that asked for no receipt.
func (c *Call) place(i int) *filing {
	if i == dlWheel {
		return &c.dl
	}
	if c.receipt == nil {
		return nil
	}
	return &c.receipt.hedge
}

// tick is the tick the call is filed under (0: not filed).
func (f filing) tick() int64 {
	if f.b == nil {
		return 0
	}
	return f.b.tick
}

// wheel holds filed calls by tick: the Unix time of the end of the tick
// in deadlineTick units.
type wheel struct {
	ticks map[int64]*bucket
	last  *bucket // the one filed in last: calls made together share it
	n     int     // calls filed
	swept int64   // the last tick whose calls were taken
}

// deadlines are the filed calls of both wheels. A call's places
// (Call.place) are guarded by mu.
type deadlines struct {
	mu    sync.Mutex
	w     [wheels]wheel
	spare []*bucket // emptied buckets, reused for new ticks
	idle  bool      // the goroutine waits for wake
	wake  chan struct{}
}

func (d *deadlines) init() {
	for i := range d.w {
		d.w[i].ticks = map[int64]*bucket{}
	}
	d.wake = make(chan struct{}, 1)
}

// tickOf is the tick whose end is the first at or after t.
func tickOf(t time.Time) int64 {
	return tickOfNanos(t.UnixNano())
}

func tickOfNanos(ns int64) int64 {
	return (ns + int64(deadlineTick) - 1) / int64(deadlineTick)
}

// file files c under its deadline's tick (the next one to be swept, if that
// passed already).
func (d *deadlines) file(c *Call) {
	d.fileAt(c, tickOf(c.deadline), 0)
}

// fileAt files c, under one lock, in the deadlines' wheel under tick dl
// and in the hedges' wheel under tick hedge; 0 leaves a wheel alone.
func (d *deadlines) fileAt(c *Call, dl, hedge int64) {
	d.mu.Lock()
	if dl != 0 {
		d.put(dlWheel, c, dl)
	}
	if hedge != 0 {
		d.put(hedgeWheel, c, hedge)
	}
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

// put files c in wheel i under tick k, or the next to be swept if that
// passed already; c must not be filed there. d.mu is held.
func (d *deadlines) put(i int, c *Call, k int64) {
	w := &d.w[i]
	k = max(k, w.swept+1)
	b := w.last
	if b == nil || b.tick != k {
		b = w.ticks[k]
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
		w.ticks[k] = b
	}
	w.last = b
	*c.place(i) = filing{b: b, pos: len(b.calls)}
	b.calls = append(b.calls, c)
	b.live++
	w.n++
}

// unfile takes c out of both wheels, where it is filed.
func (d *deadlines) unfile(c *Call) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.w {
		d.take(i, c)
	}
}

// take takes c out of wheel i, if it is filed there. d.mu is held.
func (d *deadlines) take(i int, c *Call) {
	f := c.place(i)
	if f == nil || f.b == nil {
		return
	}
	b := f.b
	b.calls[f.pos] = nil
	f.b = nil
	d.w[i].n--
	if b.live--; b.live == 0 {
		b.calls = b.calls[:0] // all nil
	}
}

// drop forgets bucket b of wheel i, and keeps it for a later tick. d.mu
// is held.
func (d *deadlines) drop(i int, b *bucket) {
	w := &d.w[i]
	delete(w.ticks, b.tick)
	if w.last == b {
		w.last = nil
	}
	d.recycle(b)
}

// recycle keeps an emptied bucket for a later tick. d.mu is held.
func (d *deadlines) recycle(b *bucket) {
	clear(b.calls)
	b.calls, b.live = b.calls[:0], 0
	if len(d.spare) < maxSpare && cap(b.calls) <= spareCap {
		d.spare = append(d.spare, b)
	}
}

// due takes out the calls filed under ticks up to now, appending those of
// the deadlines' wheel to out and those of the hedges' to hedges.
func (d *deadlines) due(now int64, out, hedges []*Call) ([]*Call, []*Call) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dueIn(dlWheel, now, out), d.dueIn(hedgeWheel, now, hedges)
}

// dueIn is due for wheel i. d.mu is held.
func (d *deadlines) dueIn(i int, now int64, out []*Call) []*Call {
	w := &d.w[i]
	take := func(k int64) {
		b, ok := w.ticks[k]
		if !ok {
			return
		}
		for _, c := range b.calls {
			if c != nil {
				c.place(i).b = nil
				out = append(out, c)
			}
		}
		w.n -= b.live
		d.drop(i, b)
	}
	if now-w.swept > int64(len(w.ticks)) {
		// Fewer filed ticks than ticks to look at (after a wait): look
		// at those filed.
		for k := range w.ticks {
			if k <= now {
				take(k)
			}
		}
	} else {
		for k := w.swept + 1; k <= now; k++ {
			take(k)
		}
	}
	w.swept = max(w.swept, now)
	return out
}

// rest reports whether nothing is filed, and if so marks the goroutine
// idle: the next file wakes it.
func (d *deadlines) rest() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.w[dlWheel].n > 0 || d.w[hedgeWheel].n > 0 {
		return false
	}
	d.idle = true
	return true
}

// expireCalls ends the calls whose deadline passed, and looks at those
// whose silence became long (hedge.go), each tick, until the bridge
// closes.
func (b *Bridge) expireCalls() {
	defer b.sweeps.Done()
	t := time.NewTimer(deadlineTick)
	defer t.Stop()
	var due, hedges, again []*Call
	empty := 0
	for {
		select {
		case <-b.closing:
			return
		case <-t.C:
		}
		now := time.Now()
		b.ticked.Store(now.UnixNano())
		due, hedges = b.deadlines.due(now.UnixNano()/int64(deadlineTick), due[:0], hedges[:0])
		for i, c := range due {
			c.finish(context.DeadlineExceeded)
			due[i] = nil
		}
		for i, c := range hedges {
			if c.silent(now) {
				again = append(again, c)
			}
			hedges[i] = nil
		}
		if len(again) > 0 {
			b.hedge(again)
			clear(again)
			again = again[:0]
		}
		if empty++; len(due) > 0 || len(hedges) > 0 {
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
