package bridge

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	detached  bool          // its end never tells the service (CallOptions.Detached)
	reqTopic  string        // the request topic it was published on
	slot      chan struct{} // the service's slots, one of which the call holds (nil: none)
	epoch     uint64        // the watch's epoch when it was made
	made      time.Time     // when it was made (the watch compares it with consumers' connection times)
	replyTo   string        // the reply-to the request named ("": none, or CallOptions.ReplyTo's)
	caller    string        // the request's caller assertion (CallOptions.Caller)
	notify    chan struct{} // signalled when chunks or the end arrive
	deadline  time.Time     // the call's own limit (CallOptions.Deadline); zero: ctx's only
	// dl is where the call is filed under its deadline (deadlines.go;
	// under when its silence becomes long: receiptState.hedge), guarded
	// by Bridge.deadlines.mu; wheeled, set before it is published, that
	// it was filed at all (only then is it taken out when it ends).
	dl      filing
	wheeled bool
	// taken: the broker took the request (its receipt came).
	taken atomic.Bool
	// sentDeadline is the deadline the request carries (zero: none): past
	// it the service ends the call by itself, and is not told to.
	sentDeadline time.Time

	mu      sync.Mutex
	queue   []Chunk
	err     error  // terminal error, reported after the queued chunks
	ended   bool   // no more chunks will arrive
	removed bool   // taken out of the pending map
	nextSeq int    // the reply message number expected next (wire.PropSeq)
	heard   uint64 // the watch's epoch when a reply message last came (0: none yet)
	resends int    // the times its service was asked to send its last reply again
	// dropSeen is the excess of messages in over those sent to this
	// bridge on its reply topic when it last asked for that (watch.go).
	dropSeen int64
	spared   bool // a reply came after the watch suspected it: not judged again
	msgs     int  // reply messages delivered
	// held is the last message of a stream from a service that does not
	// number its replies, on a non-persistent topic, kept back until the
	// watch finds the broker dropped nothing for this bridge on that
	// topic meanwhile (heldAt: since when).
	held   *Chunk
	heldAt time.Time

	// Flow control (wire.PropCredit): the service may send reply messages
	// numbered below granted; consumed counts those Recv has returned.
	// flow is the service's flow topic, once a reply named one: only then
	// is the call a flow-controlled stream.
	granted  int
	consumed int
	flow     string
	// credited: the call holds credit, reserved bytes of the budget
	// (Bridge.reserved) for it, at est bytes per reply message (the mean
	// of those received, bytes of them in all, when it grants).
	credited     bool
	reserved     int64
	reservedMsgs int64
	est          int64
	bytes        int64
	// flowChecked is the flow topic last found to be the service's.
	flowChecked string

	// via is the topic of the first reply the call took, and numbered
	// whether it carried a number: later replies must match both
	// (Bridge.route). Set once under mu, then bound is set: read without
	// mu after that.
	via      string
	numbered bool
	bound    atomic.Bool
	// inst is the service instance the call is bound to: the first that
	// named itself on a reply the call took (wire.PropInstance; a receipt
	// binds nothing). Set once under mu, then instBound is set.
	inst      string
	instBound atomic.Bool
	// receipt: the call asked for a receipt (receipt.go); nil: not.
	receipt *receiptState
}

// replyTopic is where a Go SDK service answers the call, when the watch
// should mind this bridge's consumer there: its reply topic, or the
// service's response topic without one; "" for calls whose replies go to
// a topic of CallOptions.ReplyTo (another subscription's).
func (c *Call) replyTopic() string {
	switch {
	case c.replyTo == c.b.opts.ReplyTopic && c.replyTo != "":
		return c.replyTo
	case c.replyTo == "":
		return c.respTopic
	}
	return ""
}

// ID is the call's correlation id.
func (c *Call) ID() string { return c.id }

func (c *Call) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// mismatch checks a reply message — from topic, numbered or not, naming
// instance inst ("": none) — against the reply the call took first, if
// it took one: "" when it matches (or there is none yet), else why it is
// refused. It takes no lock: what the call's first reply bound is set
// once, before bound (instBound), and read only after it.
func (c *Call) mismatch(topic string, numbered bool, inst string) string {
	if c.bound.Load() {
		switch {
		case c.via != topic:
			return "the call's replies come on another topic (" + c.via + ")"
		case c.numbered && !numbered:
			return "the reply has no sequence number, though the call's replies are numbered"
		case !c.numbered && numbered:
			return "the reply has a sequence number, though the call's replies are not numbered"
		}
	}
	return c.otherInstance(inst)
}

// otherInstance reports why a message naming instance inst is not the
// call's: another instance's replies were taken for it. "" when inst
// names none, when the call took no reply naming one, or when it is that
// one.
func (c *Call) otherInstance(inst string) string {
	if inst != "" && c.instBound.Load() && c.inst != inst {
		return "another instance of the service answers this call (" + c.inst + ")"
	}
	return ""
}

// bind makes a reply message the call takes — from topic, numbered or
// not, naming instance inst — the one later replies must match (topic
// and numbering from its first reply, the instance from its first reply
// naming one). Only a reply taken binds: a receipt, or a message refused,
// binds nothing, so that a forgery refused can never have the genuine
// answer refused after it. c.mu is held; the message matched (mismatch).
func (c *Call) bind(topic string, numbered bool, inst string) {
	if !c.bound.Load() {
		c.via, c.numbered = topic, numbered
		c.bound.Store(true)
	}
	if inst != "" && !c.instBound.Load() {
		c.inst = inst
		c.instBound.Store(true)
	}
}

// unnumbered reports whether the call's first reply came without a
// number (a service that does not number its replies answered it).
func (c *Call) unnumbered() bool {
	return c.bound.Load() && !c.numbered
}

// numbers reports whether the service answering on responseTopic has been
// seen numbering its replies.
func (b *Bridge) numbers(responseTopic string) bool {
	_, ok := b.numbering.Load(responseTopic)
	return ok
}

// What deliver did with a reply message.
type delivery int

const (
	delivered  delivery = iota
	mismatched          // refused: not like the reply the call took first (mismatch)
	replayed            // refused: a number (seq) the call has had already
	badFlow             // refused: it names a flow topic not of the call's service
	// late: the call had ended, and is yet to leave the pending map (a
	// call given up tells its service before it leaves, and the reply
	// that provokes can come first): nobody waits for it, an orphan.
	late
)

// deliver queues one decoded reply message, which came on topic and names
// instance inst ("": none). It never blocks: a reader that falls too far
// behind ends its own call with ErrSlowReader. It refuses a message not
// like the reply the call took first (mismatch, and why), one whose
// number (seq) the call has had already — a replay, or a forgery racing
// the real reply — and one naming a flow topic (flow) that is not its
// service's, which is checked once per topic named, not per chunk (route
// then ends the call, as it does on a malformed reply). A message refused
// binds nothing (bind), and neither names the call's flow topic nor
// counts towards its credit: those are the messages it takes. A message
// for a call that has ended is dropped (late).
func (c *Call) deliver(r wire.Response, topic, seq, flow, inst string, size int) (delivery, string) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return late, ""
	}
	// Again under the lock: a message on another topic may have bound
	// the call since the caller looked.
	if why := c.mismatch(topic, seq != "", inst); why != "" {
		c.mu.Unlock()
		return mismatched, why
	}
	n := 0
	if seq != "" {
		var err error
		if n, err = strconv.Atoi(seq); err != nil || n < c.nextSeq {
			c.mu.Unlock()
			return replayed, ""
		}
	}
	if flow != "" && flow != c.flowChecked {
		if !wire.FlowTopicAllowed(flow, c.reqTopic) {
			c.mu.Unlock()
			return badFlow, ""
		}
		c.flowChecked = flow
	}
	// Taken.
	c.bind(topic, seq != "", inst)
	if flow != "" && c.flow == "" && c.granted > 0 {
		c.flow = flow
		c.b.streams.Add(1)
	}
	if c.credited {
		c.bytes += int64(size)
		if flow == "" && seq == "" && c.reserved > 0 {
			// A service that does not do flow control: the credit
			// held for it goes back to the others.
			c.giveBack()
		}
	}
	lost := 0
	if seq != "" {
		// Replies of one call come in order; a number past the one
		// expected means the broker dropped the ones between.
		lost = n - c.nextSeq
		c.nextSeq = n + 1
	}
	c.heard = c.b.epoch.Load()
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
	case seq == "" && r.EndOfStream && c.msgs > 0 && c.b.counter != nil && strings.HasPrefix(c.respTopic, "non-persistent://"):
		// Unnumbered, so a hole would not show: the end waits for the
		// watch's word that nothing was dropped (watch.go, checkHeld).
		c.held, c.heldAt = &Chunk{Text: r.Response, Last: true}, time.Now()
		c.msgs++
		select { // a question soon, not at the next tick
		case c.b.watch.poke <- struct{}{}:
		default:
		}
	default:
		c.queue = append(c.queue, Chunk{Text: r.Response, Last: r.EndOfStream})
		c.ended = r.EndOfStream
		c.msgs++
	}
	ended := c.ended
	c.mu.Unlock()
	c.b.learn(c, topic, seq != "", inst)
	if ended {
		c.remove()
		if c.hedgedAway() && !c.detached {
			// Another instance may hold a copy of the request: it is
			// not to run it now.
			c.b.sendCancel(c.reqTopic, c.id)
		}
	}
	c.signal()
	return delivered, ""
}

// release passes on a held last message: the call ends whole.
func (c *Call) release() {
	c.mu.Lock()
	if c.held == nil || c.ended {
		c.mu.Unlock()
		return
	}
	c.queue = append(c.queue, *c.held)
	c.held, c.ended = nil, true
	c.mu.Unlock()
	c.remove()
	c.signal()
}

// finish ends the call with err unless it already ended. The service is
// told to stop (tell), as nobody will read what it sends: a stream's on
// its flow topic, any other on the service's cancel topic, which every
// instance reads (wire.CancelTopic) — unless the request's own deadline
// has passed, which the service heeds by itself.
func (c *Call) finish(err error) { c.end(err, true) }

// end is finish; tell false for a call whose request was never sent.
func (c *Call) end(err error, tell bool) {
	c.mu.Lock()
	flow, first := "", !c.ended
	if first {
		c.err = err
		c.ended = true
		flow = c.flow
	}
	c.mu.Unlock()
	switch {
	case !first || !tell || c.detached:
	case flow != "":
		c.b.sendGrant(flow, c.id, -1)
	case !errors.Is(err, context.DeadlineExceeded) || c.sentDeadline.IsZero() || time.Now().Before(c.sentDeadline):
		c.b.sendCancel(c.reqTopic, c.id)
	}
	c.remove()
	c.signal()
}

// remove takes the call out of the pending map, once.
func (c *Call) remove() {
	c.mu.Lock()
	done := c.removed
	c.removed = true
	stream := c.flow != ""
	credited := c.credited
	if !done && credited {
		c.giveBack()
	}
	c.mu.Unlock()
	if !done {
		c.b.pending.delete(c.id)
		if c.wheeled {
			c.b.deadlines.unfile(c)
		}
		c.b.inFlight.Add(-1)
		if c.slot != nil {
			<-c.slot
		}
		if stream {
			c.b.streams.Add(-1)
		}
	}
}

// Recv returns the next chunk. After the last chunk it returns io.EOF. A
// tool-service failure is returned as *wire.Error. When ctx ends first, the
// call is abandoned and ctx's error returned; when the call's deadline
// (CallOptions.Deadline) passes first, it is abandoned with context.DeadlineExceeded.
func (c *Call) Recv(ctx context.Context) (Chunk, error) {
	return c.RecvIdle(ctx, 0, nil)
}

// RecvIdle is Recv that also gives up when no chunk comes within idle
// (from the call of RecvIdle; 0: no limit): then the call is abandoned and
// idleErr returned. It costs nothing when a chunk is waiting already, and
// a pooled timer for idle otherwise — not a context per chunk. (The
// call's own deadline is kept by the bridge: deadlines.go.)
func (c *Call) RecvIdle(ctx context.Context, idle time.Duration, idleErr error) (Chunk, error) {
	var (
		regrant <-chan time.Time // a stream's grant is due again
		idleC   <-chan time.Time // no chunk within idle
	)
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			ch := c.queue[0]
			c.queue[0] = Chunk{}
			c.queue = c.queue[1:]
			flow, limit := c.credit()
			c.mu.Unlock()
			if limit > 0 {
				c.b.sendGrant(flow, c.id, limit)
			}
			return ch, nil
		}
		err, ended, flow, starved := c.err, c.ended, c.flow, c.granted <= c.consumed
		c.mu.Unlock()
		if !ended && flow != "" && regrant == nil {
			// Credit used up: look for room in the budget soon; else
			// send the grant again after a while, should it be lost.
			t := getTimer(regrantAfter)
			if starved {
				t.Reset(starvedRetry)
			}
			defer putTimer(t)
			regrant = t.C
		}
		if ended {
			if err == nil {
				err = io.EOF
			}
			return Chunk{}, err
		}
		if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
			// Past it already: not left to the next tick of the
			// deadlines, which ends the call once it passes in the wait.
			c.finish(context.DeadlineExceeded)
			return Chunk{}, context.DeadlineExceeded
		}
		if idle > 0 && idleC == nil {
			t := getTimer(idle)
			defer putTimer(t)
			idleC = t.C
		}
		select {
		case <-c.notify:
		case <-idleC:
			c.finish(context.DeadlineExceeded)
			return Chunk{}, idleErr
		case <-regrant:
			// More credit if the budget has room now; else, unless the
			// stream waits for room, the last grant again: it may have
			// been lost.
			c.mu.Lock()
			limit := c.grantMore(starved)
			if limit == 0 && !starved {
				limit = c.granted
			}
			c.mu.Unlock()
			if limit > 0 {
				c.b.sendGrant(flow, c.id, limit)
			}
			regrant = nil
		case <-ctx.Done():
			c.finish(ctx.Err())
			return Chunk{}, context.Cause(ctx)
		}
	}
}

// credit counts one more reply message taken by the reader and, for a
// flow-controlled stream whose service has half its window or less left
// to send, raises the limit as far as its window and the budgets allow:
// it returns the flow topic and the new limit to grant (0: none due).
// c.mu is held.
func (c *Call) credit() (string, int) {
	c.consumed++
	if c.flow == "" {
		return "", 0
	}
	if limit := c.grantMore(false); limit > 0 {
		return c.flow, limit
	}
	return "", 0
}

// giveBack returns the call's credit to the budgets. c.mu is held.
func (c *Call) giveBack() {
	b := c.b
	b.creditMu.Lock()
	b.reservedBytes -= c.reserved
	b.reservedMsgs -= c.reservedMsgs
	b.reserved.Store(b.reservedBytes)
	b.creditMu.Unlock()
	c.reserved, c.reservedMsgs = 0, 0
}

// grantMore raises the call's credit towards its window (Bridge.window)
// as far as StreamBudgetBytes has room, taking the bytes from the budget:
// when the service has half its window or less left to send, or always
// with now. It returns the new limit, 0 when it did not rise. A call
// with no credit left is given one message at least. c.mu is held.
func (c *Call) grantMore(now bool) int {
	if c.ended || c.removed {
		return 0 // its credit went back with it
	}
	b := c.b
	out := max(int64(c.granted-c.consumed), 0)
	if c.msgs > 0 {
		c.est = max(c.bytes/int64(c.msgs), replyOverhead)
	}
	want := b.window(c.est)
	if !now && out > want/2 {
		return 0
	}
	b.creditMu.Lock()
	defer b.creditMu.Unlock()
	// What the budgets have room for, this call's own share given back.
	roomBytes := (int64(b.opts.StreamBudgetBytes) - (b.reservedBytes - c.reserved)) / c.est
	roomMsgs := int64(b.opts.StreamBudget) - (b.reservedMsgs - c.reservedMsgs)
	next := min(want, roomBytes, roomMsgs)
	if out == 0 {
		// A call always has a message of credit: none waits on others
		// for ever, and the budgets are passed by a message a call at
		// most (as by the one unbounded reply of each call).
		next = max(next, 1)
	}
	if next <= out {
		return 0
	}
	res := next * c.est
	b.reservedBytes += res - c.reserved
	b.reservedMsgs += next - c.reservedMsgs
	b.reserved.Store(b.reservedBytes)
	c.reserved, c.reservedMsgs = res, next
	c.granted = c.consumed + int(next)
	return c.granted
}

// firstGrant reserves a stream's first credit: its window as one more
// stream, as far as the budgets have room (at reply messages of
// replyBytesGuess bytes until one came). The call is not published yet.
func (c *Call) firstGrant() int {
	b := c.b
	n := b.streams.Load() + 1
	want := min(int64(b.opts.StreamWindow), int64(b.opts.StreamBudget)/n, int64(b.opts.StreamBudgetBytes)/(n*c.est))
	b.creditMu.Lock()
	defer b.creditMu.Unlock()
	next := min(want, (int64(b.opts.StreamBudgetBytes)-b.reservedBytes)/c.est, int64(b.opts.StreamBudget)-b.reservedMsgs)
	if next <= firstCredit {
		return 0 // no more than any call starts with
	}
	c.reserved, c.reservedMsgs = next*c.est, next
	b.reservedBytes += c.reserved
	b.reservedMsgs += next
	b.reserved.Store(b.reservedBytes)
	return int(next)
}

// Wait reads every chunk and returns them joined in order.
func (c *Call) Wait(ctx context.Context) (string, error) {
	var (
		first string // the commonest reply is one chunk: no copy of it
		sb    strings.Builder
		n     int
	)
	for {
		ch, err := c.Recv(ctx)
		if errors.Is(err, io.EOF) {
			if n <= 1 {
				return first, nil
			}
			return sb.String(), nil
		}
		if err != nil {
			return "", err
		}
		switch n++; n {
		case 1:
			first = ch.Text
		case 2:
			sb.WriteString(first)
			fallthrough
		default:
			sb.WriteString(ch.Text)
		}
	}
}

// Close abandons the call: later replies for it are counted as orphans.
func (c *Call) Close() {
	c.finish(context.Canceled)
}

// Drop ends the call like Close but does not tell the service: for a call
// whose end someone else has dealt with (a durable operation that ended,
// or was cancelled, on another gateway, which told the service).
func (c *Call) Drop() {
	c.end(context.Canceled, false)
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
