package bridge

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// Receipts and the second publish (wire.PropReceipt). A request to a Go
// SDK service can be dropped on a non-persistent request topic when the
// broker hands it to a replica whose consumer is closing (a graceful
// stop): the client library drops what reaches a consumer it is closing,
// and nothing sends it again. The bridge therefore asks the services seen
// marking their replies with their instance (wire.PropInstance: they
// honour receipts) for a receipt, which an instance sends only when the
// call has no reply within wire.ReceiptAfter. A call that has heard
// nothing at all — no receipt, no reply — RepublishAfter after it was
// made, when an instance of its service has left (InstanceLeft) since
// leftWindow before the call was made, is published once more with the
// same id: an instance that has it already does not run it again. The
// call takes its replies from the first instance whose reply it takes
// (Call.bind); a receipt binds it to none (routeReceipt). A call that has
// heard nothing for longer than its service takes to speak up is
// published again even when no instance left (a hedge: hedge.go), and
// counts as published then.
//
// No call has a timer of its own for this: only a call made up to
// leftWindow after an instance left, or in flight when it left, can be
// published again, so an instance's leaving starts a sweep (one
// goroutine) that looks at the calls waiting for a word every
// RepublishAfter/4, and stops once no call can be published again because
// of that leaving. A call costs nothing more than a few words of memory
// for it in the meantime.

// republishTimeout bounds a second publish of a call without a deadline.
const republishTimeout = 10 * time.Second

// DefaultRepublishAfter is Options.RepublishAfter's default.
const DefaultRepublishAfter = 2 * time.Second

// leftWindow is how long before a call was made an instance's leaving
// still makes its silence suspect: a request can wait that long in a
// stopping replica's queue before the close drops it.
const leftWindow = 10 * time.Second

// receiptState is a call's part in receipts: only calls that asked for one
// have it. The request is not kept whole: its properties are written
// again from the call when it is published again (republishProps).
type receiptState struct {
	payload []byte
	// props are the request's properties when the publish hook added to
	// them (a trace context); nil: none added.
	props map[string]string
	// topic is what is known of its service's words (hedge.go).
	topic *receiptTopic
	// hedge is where the call is filed under when its silence becomes
	// long (deadlines.go), guarded by Bridge.deadlines.mu.
	hedge filing
	made  int64 // Unix nanoseconds
	// again is when it was last published again (0: not yet), hedges how
	// many times for its silence alone (hedge.go), holders the instances
	// that sent a receipt for it (a few at most; nil before the first).
	// Guarded by the call's mu.
	again   int64
	holders *[]string
	credit  int32 // the credit the request granted (wire.PropCredit)
	hedges  int32
	// sent counts its publishes after the first, of either kind.
	sent atomic.Int32
	word atomic.Bool // a receipt or a reply came
}

// InstanceLeft says that an instance of the service on requestTopic has
// left (its announcement was withdrawn: a graceful stop). Calls to it that
// asked for a receipt and have heard nothing may be published again.
func (b *Bridge) InstanceLeft(requestTopic string) {
	now := time.Now().UnixNano()
	v, _ := b.left.LoadOrStore(requestTopic, new(atomic.Int64))
	v.(*atomic.Int64).Store(now)
	b.lastLeft.Store(now)
	if b.opts.RepublishAfter > 0 && b.sweeping.CompareAndSwap(false, true) {
		b.startSweep()
	}
}

// startSweep starts a sweep unless the bridge is closed (the caller set
// sweeping).
func (b *Bridge) startSweep() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.sweeps.Add(1)
	go func() {
		defer b.sweeps.Done()
		b.sweep()
	}()
}

// leftSince reports whether an instance of the service on requestTopic
// left at t (Unix nanoseconds) or later.
func (b *Bridge) leftSince(requestTopic string, t int64) bool {
	v, ok := b.left.Load(requestTopic)
	return ok && v.(*atomic.Int64).Load() >= t
}

// sweepTick is how often the sweep looks at the calls.
func (b *Bridge) sweepTick() time.Duration { return max(b.opts.RepublishAfter/4, time.Millisecond) }

// sweep looks at the calls waiting for a word every sweepTick while an
// instance's leaving can still have a call published again: until
// leftWindow + RepublishAfter (and two ticks) after the last one left.
func (b *Bridge) sweep() {
	tick := b.sweepTick()
	span := int64(leftWindow + b.opts.RepublishAfter + 2*tick)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-b.closing:
			return
		case <-t.C:
		}
		now := time.Now()
		if now.UnixNano()-b.lastLeft.Load() > span {
			b.sweeping.Store(false)
			// One that left since the check above starts a sweep of its
			// own, unless this one is still here to take it on.
			if time.Now().UnixNano()-b.lastLeft.Load() > span || !b.sweeping.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		for _, c := range b.pending.collect(func(c *Call) bool { return c.receipt != nil && !c.receipt.word.Load() }) {
			c.checkWord(now)
		}
	}
}

// wantsReceipts returns what is known of the words of the service
// answering on responseTopic when its calls ask for receipts; nil when
// they do not.
func (b *Bridge) wantsReceipts(responseTopic string) *receiptTopic {
	if b.opts.RepublishAfter < 0 {
		return nil
	}
	if v, ok := b.receipting.Load(responseTopic); ok {
		return v.(*receiptTopic)
	}
	return nil
}

// learnReceipts notes that the service answering on responseTopic marks
// its replies with its instance: it sends receipts when asked.
func (b *Bridge) learnReceipts(responseTopic string) {
	if _, ok := b.receipting.Load(responseTopic); !ok {
		if _, had := b.receipting.LoadOrStore(responseTopic, &receiptTopic{}); !had {
			b.log.Info("tool service names its instance on replies; its calls ask for receipts", "response_topic", responseTopic)
		}
	}
}

// armReceipt makes call c, whose request carries payload and grants
// credit, wait for a word of its service on topic t.
func (c *Call) armReceipt(payload []byte, credit int, t *receiptTopic) {
	c.receipt = &receiptState{payload: payload, credit: int32(credit), made: time.Now().UnixNano(), topic: t}
}

// heardWord notes a receipt or reply for the call. The first, for a call
// published once, tells how long its service took to speak up (hedge.go),
// by the deadlines' clock: it ticks while the call is filed, and a word
// that came before its first tick came soon.
func (c *Call) heardWord() {
	r := c.receipt
	if r == nil || r.word.Load() || !r.word.CompareAndSwap(false, true) {
		return
	}
	if r.sent.Load() == 0 && c.b.opts.HedgeAfter > 0 {
		r.topic.sample(max(c.b.ticked.Load()-r.made, 0))
	}
}

// republishProps are the properties of the call's request, written again
// for its second publish: those Call wrote, and what the publish hook
// added, if it did.
func (c *Call) republishProps() map[string]string {
	r := c.receipt
	if r.props != nil {
		return r.props
	}
	return c.requestProps(int(r.credit), true)
}

// requestProps are the properties of the call's request: its id, and its
// words (wire.PropCall) — where the replies go, the first credit granted
// (credit, when the call is flow-controlled), the deadline, and whether
// it asks for a receipt, and its caller assertion.
func (c *Call) requestProps(credit int, receipt bool) map[string]string {
	props := make(map[string]string, 2)
	props[wire.PropID] = c.id
	w := wire.CallWords{ReplyTo: c.replyTo, Deadline: wire.DeadlineMillis(c.sentDeadline), Receipt: receipt, Caller: c.caller}
	if c.credited {
		w.Credit = credit
	}
	var buf [192]byte
	if v := wire.AppendCall(buf[:0], w); len(v) > 0 {
		props[wire.PropCall] = string(v)
	}
	return props
}

// checkWord runs on the sweep: a call that has heard nothing since
// RepublishAfter after it was made, when an instance of its service has
// left since shortly before the call was made, is published once more —
// and once more again, no sooner than RepublishAfter later, only when
// another leaves after that (the second publish may have met a replica
// stopping too). A publish for its silence alone (hedge.go) counts as
// the last one.
func (c *Call) checkWord(now time.Time) {
	r := c.receipt
	b := c.b
	n, after := now.UnixNano(), int64(b.opts.RepublishAfter)
	if r.word.Load() {
		return
	}
	c.mu.Lock()
	if c.ended || c.removed || !c.taken.Load() || n-r.made < after || (r.again != 0 && n-r.again < after) {
		c.mu.Unlock()
		return
	}
	since := r.made - int64(leftWindow)
	if r.again != 0 {
		since = r.again
	}
	if !b.leftSince(c.reqTopic, since) {
		c.mu.Unlock()
		return
	}
	r.again = n
	c.mu.Unlock()
	if b.down.Load() != nil {
		return // the broker takes nothing now; calls end by the fail-fast path
	}
	b.log.Info("no word of a call since an instance of its service left; publishing its request again",
		"id", c.id, "request_topic", c.reqTopic, "after", time.Duration(n-r.made).Round(time.Millisecond))
	c.publishAgain()
}

// publishAgain publishes the call's request once more, same id, same
// properties.
func (c *Call) publishAgain() {
	r := c.receipt
	b := c.b
	r.sent.Add(1)
	b.republished.Add(1)
	msg := transport.Message{Payload: r.payload, Properties: c.republishProps(), Deadline: c.sentDeadline}
	// Bounded by the call's deadline, else by republishTimeout; the
	// context ends with the publish, which may finish after this returns.
	var ctx context.Context
	var cancel context.CancelFunc
	if c.sentDeadline.IsZero() {
		ctx, cancel = context.WithTimeout(context.Background(), republishTimeout)
	} else {
		ctx, cancel = context.WithDeadline(context.Background(), c.sentDeadline)
	}
	err := b.publish(ctx, c.reqTopic, msg, func(err error) {
		cancel()
		if err != nil {
			b.log.Warn("publishing a request again failed", "id", c.id, "request_topic", c.reqTopic, "err", err)
		}
	})
	if err != nil {
		cancel()
		b.log.Warn("publishing a request again failed", "id", c.id, "request_topic", c.reqTopic, "err", err)
	}
}

// routeReceipt takes a receipt (a message with wire.PropReceipt) for call
// c, which came on topic: from where the call's replies are expected, and
// not from another instance than the one whose replies the call took. A
// receipt binds the call to nothing: anyone who may publish where the
// replies go can send one, naming any instance, and the call takes its
// answer from whichever instance answers first (Call.bind). Taken, it
// keeps the call from being published again — as a call to a service
// that sends no receipts never is — and notes its instance as having the
// call: should that instance be lost, and every other one that sent a
// receipt for it, the call ends (InstanceLost). A forged receipt can
// thus end a call only when the instance it names is lost — no more
// than a forged error reply, taken first, can.
func (b *Bridge) routeReceipt(topic string, c *Call, viaReplyTo bool, inst string) {
	if !viaReplyTo && topic != c.respTopic {
		b.refuse(topic, c.id, "a receipt from a topic where this call's replies are not expected", "response_topic", c.respTopic)
		return
	}
	if why := c.otherInstance(inst); why != "" {
		b.refuseFor(c, topic, "a receipt, though "+why)
		return
	}
	c.noteHolder(inst)
	c.heardWord()
	b.receipts.Add(1)
}
