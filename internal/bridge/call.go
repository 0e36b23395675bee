package bridge

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// Chunk is one piece of a reply.
type Chunk struct {
	Text string
	Last bool
}

// Call is one request waiting for its reply chunks.
type Call struct {
	b         *Bridge
	id        string
	respTopic string        // the response topic of the service called
	notify    chan struct{} // signalled when chunks or the end arrive
	deadline  time.Time     // the call's own limit (CallUntil); zero: ctx's only

	mu      sync.Mutex
	queue   []Chunk
	err     error // terminal error, reported after the queued chunks
	ended   bool  // no more chunks will arrive
	removed bool  // taken out of the pending map
	nextSeq int   // the reply message number expected next (wire.PropSeq)
}

// ID is the call's correlation id.
func (c *Call) ID() string { return c.id }

func (c *Call) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// deliver queues one decoded reply message. It never blocks: a reader that
// falls too far behind ends its own call with ErrSlowReader. It reports
// false for a message it refuses: one whose number (seq) the call has had
// already — a replay, or a forgery racing the real reply.
func (c *Call) deliver(r wire.Response, seq string) bool {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return true
	}
	lost := 0
	if seq != "" {
		// Replies of one call come in order; a number past the one
		// expected means the broker dropped the ones between.
		n, err := strconv.Atoi(seq)
		if err != nil || n < c.nextSeq {
			c.mu.Unlock()
			return false
		}
		lost = n - c.nextSeq
		c.nextSeq = n + 1
	}
	switch {
	case lost > 0:
		c.err = &LostRepliesError{Lost: lost}
		c.ended = true
	case r.Error != nil:
		c.err = r.Error
		c.ended = true
	case len(c.queue) >= c.b.opts.MaxBufferedChunks:
		c.err = ErrSlowReader
		c.ended = true
	default:
		c.queue = append(c.queue, Chunk{Text: r.Response, Last: r.EndOfStream})
		c.ended = r.EndOfStream
	}
	ended := c.ended
	c.mu.Unlock()
	if ended {
		c.remove()
	}
	c.signal()
	return true
}

// finish ends the call with err unless it already ended.
func (c *Call) finish(err error) {
	c.mu.Lock()
	if !c.ended {
		c.err = err
		c.ended = true
	}
	c.mu.Unlock()
	c.remove()
	c.signal()
}

// remove takes the call out of the pending map, once.
func (c *Call) remove() {
	c.mu.Lock()
	done := c.removed
	c.removed = true
	c.mu.Unlock()
	if !done {
		c.b.pending.delete(c.id)
		c.b.inFlight.Add(-1)
	}
}

// Recv returns the next chunk. After the last chunk it returns io.EOF. A
// tool-service failure is returned as *wire.Error. When ctx ends first, the
// call is abandoned and ctx's error returned; when the call's deadline
// (CallUntil) passes first, it is abandoned with context.DeadlineExceeded.
func (c *Call) Recv(ctx context.Context) (Chunk, error) {
	var (
		timer   *time.Timer
		expired <-chan time.Time
	)
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			ch := c.queue[0]
			c.queue[0] = Chunk{}
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return ch, nil
		}
		err, ended := c.err, c.ended
		c.mu.Unlock()
		if ended {
			if err == nil {
				err = io.EOF
			}
			return Chunk{}, err
		}
		if expired == nil && !c.deadline.IsZero() {
			// One timer per wait, not a context per call: the call's
			// own deadline costs a context nothing.
			wait := time.Until(c.deadline)
			if wait <= 0 {
				c.finish(context.DeadlineExceeded)
				return Chunk{}, context.DeadlineExceeded
			}
			timer = getTimer(wait)
			defer putTimer(timer)
			expired = timer.C
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			c.finish(ctx.Err())
			return Chunk{}, context.Cause(ctx)
		case <-expired:
			c.finish(context.DeadlineExceeded)
			return Chunk{}, context.DeadlineExceeded
		}
	}
}

// Wait reads every chunk and returns them joined in order.
func (c *Call) Wait(ctx context.Context) (string, error) {
	var sb strings.Builder
	for {
		ch, err := c.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return sb.String(), nil
		}
		if err != nil {
			return "", err
		}
		sb.WriteString(ch.Text)
	}
}

// Close abandons the call: later replies for it are counted as orphans.
func (c *Call) Close() {
	c.finish(context.Canceled)
}

// timers are reused by Recv: a stopped timer holds no stale tick (Go 1.23
// timers), so one can be Reset for the next call.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

func getTimer(d time.Duration) *time.Timer {
	t := timers.Get().(*time.Timer)
	t.Reset(d)
	return t
}

func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}
