package bridge

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
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
// call takes its replies from the first instance that answers (Call.bind).

// republishTimeout bounds a second publish of a call without a deadline.
const republishTimeout = 10 * time.Second

// DefaultRepublishAfter is Options.RepublishAfter's default.
const DefaultRepublishAfter = 2 * time.Second

// leftWindow is how long before a call was made an instance's leaving
// still makes its silence suspect: a request can wait that long in a
// stopping replica's queue before the close drops it.
const leftWindow = 10 * time.Second

// receiptState is a call's part in receipts: only calls that asked for one
// have it.
type receiptState struct {
	msg  transport.Message // the request, to publish again
	made time.Time
	// again is when it was last published again (zero: not yet): once
	// more only if another instance leaves after that.
	again time.Time
	timer *time.Timer
	word  atomic.Bool // a receipt or a reply came
}

// InstanceLeft says that an instance of the service on requestTopic has
// left (its announcement was withdrawn: a graceful stop). Calls to it that
// asked for a receipt and have heard nothing may be published again.
func (b *Bridge) InstanceLeft(requestTopic string) {
	now := time.Now().UnixNano()
	v, _ := b.left.LoadOrStore(requestTopic, new(atomic.Int64))
	v.(*atomic.Int64).Store(now)
}

// leftSince reports whether an instance of the service on requestTopic
// left at t or later.
func (b *Bridge) leftSince(requestTopic string, t time.Time) bool {
	v, ok := b.left.Load(requestTopic)
	return ok && v.(*atomic.Int64).Load() >= t.UnixNano()
}

// wantsReceipts reports whether calls to the service answering on
// responseTopic ask for receipts.
func (b *Bridge) wantsReceipts(responseTopic string) bool {
	if b.opts.RepublishAfter < 0 {
		return false
	}
	_, ok := b.receipting.Load(responseTopic)
	return ok
}

// learnReceipts notes that the service answering on responseTopic marks
// its replies with its instance: it sends receipts when asked.
func (b *Bridge) learnReceipts(responseTopic string) {
	if _, ok := b.receipting.Load(responseTopic); !ok {
		b.receipting.Store(responseTopic, struct{}{})
		b.log.Info("tool service names its instance on replies; its calls ask for receipts", "response_topic", responseTopic)
	}
}

// armReceipt makes call c, whose request msg asks for a receipt, wait for
// a word of its service.
func (c *Call) armReceipt(msg transport.Message) {
	c.receipt = &receiptState{msg: msg, made: time.Now()}
}

// startReceiptTimer starts the wait, once the request is out.
func (c *Call) startReceiptTimer() {
	r := c.receipt
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.removed {
		r.timer = time.AfterFunc(c.b.opts.RepublishAfter, c.checkWord)
	}
}

// heardWord notes a receipt or reply for the call.
func (c *Call) heardWord() {
	if r := c.receipt; r != nil && !r.word.Load() {
		r.word.Store(true)
	}
}

// stopReceiptTimer ends the wait (the call is over); c.mu is held.
func (c *Call) stopReceiptTimer() {
	if r := c.receipt; r != nil && r.timer != nil {
		r.timer.Stop()
	}
}

// checkWord runs RepublishAfter after the call was published, and again
// every RepublishAfter while it hears nothing: once an instance of its
// service has left since shortly before the call was made, the request is
// published once more — and once more again only when another leaves
// after that (the second publish may have met a replica stopping too).
func (c *Call) checkWord() {
	r := c.receipt
	if r.word.Load() {
		return
	}
	c.mu.Lock()
	over := c.ended || c.removed
	c.mu.Unlock()
	if over {
		return
	}
	b := c.b
	since := r.made.Add(-leftWindow)
	if !r.again.IsZero() {
		since = r.again
	}
	republish := c.taken.Load() && b.leftSince(c.reqTopic, since)
	if republish {
		r.again = time.Now() // before the timer runs this again
	}
	c.mu.Lock()
	if !c.removed {
		r.timer.Reset(b.opts.RepublishAfter)
	}
	c.mu.Unlock()
	if !republish {
		return
	}
	if b.down.Load() != nil {
		return // the broker takes nothing now; calls end by the fail-fast path
	}
	msg := r.msg
	msg.Deadline = c.sentDeadline
	b.republished.Add(1)
	b.log.Info("no word of a call since an instance of its service left; publishing its request again",
		"id", c.id, "request_topic", c.reqTopic, "after", time.Since(r.made).Round(time.Millisecond))
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
// from the instance the call is bound to, if any.
func (b *Bridge) routeReceipt(topic string, c *Call, viaReplyTo bool, inst string) {
	if !viaReplyTo && topic != c.respTopic {
		b.refuse(topic, c.id, "a receipt from a topic where this call's replies are not expected", "response_topic", c.respTopic)
		return
	}
	if why := c.bindInstance(inst); why != "" {
		b.refuse(topic, c.id, why)
		return
	}
	b.receipts.Add(1)
	c.heardWord()
}

// bindInstance binds the call to the instance inst that answers it, when
// it names one and the call has none yet: "" when it matches, else why it
// is refused.
func (c *Call) bindInstance(inst string) string {
	if inst == "" {
		return ""
	}
	if !c.instBound.Load() { // the first to name one; no lock after that
		c.mu.Lock()
		if !c.instBound.Load() {
			c.inst = inst
			c.instBound.Store(true)
		}
		c.mu.Unlock()
	}
	if c.inst != inst {
		return "another instance of the service answers this call (" + c.inst + ")"
	}
	return ""
}
