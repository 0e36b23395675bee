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
// was parked; filing one costs a lock and a map entry shared with the
// calls of the same tick.

// deadlineTick is the resolution of calls' deadlines.
const deadlineTick = 10 * time.Millisecond

// deadlineIdleTicks is how many ticks without a filed call the goroutine
// goes on ticking before it waits for the next one: calls one at a time
// do not wake it for each.
const deadlineIdleTicks = 100

// deadlines are the filed calls, by tick: the Unix time of the end of the
// tick in deadlineTick units. A call's place (Call.dlTick, Call.dlPos) is
// guarded by mu.
type deadlines struct {
	mu    sync.Mutex
	ticks map[int64][]*Call
	n     int   // calls filed
	swept int64 // the last tick whose calls were ended
	idle  bool  // the goroutine waits for wake
	wake  chan struct{}
}

func (d *deadlines) init() {
	d.ticks = map[int64][]*Call{}
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
	s := d.ticks[k]
	c.dlTick, c.dlPos = k, len(s)
	d.ticks[k] = append(s, c)
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
	k := c.dlTick
	if k == 0 {
		return
	}
	s := d.ticks[k]
	last := len(s) - 1
	if i := c.dlPos; i != last {
		s[i] = s[last]
		s[i].dlPos = i
	}
	s[last] = nil
	if last == 0 {
		delete(d.ticks, k)
	} else {
		d.ticks[k] = s[:last]
	}
	c.dlTick = 0
	d.n--
}

// due takes out the calls filed under ticks up to now, appending them to
// out.
func (d *deadlines) due(now int64, out []*Call) []*Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	take := func(k int64) {
		s, ok := d.ticks[k]
		if !ok {
			return
		}
		for _, c := range s {
			c.dlTick = 0
		}
		out = append(out, s...)
		delete(d.ticks, k)
		d.n -= len(s)
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
