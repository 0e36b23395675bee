package bridge

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// Hedges, and instances lost (wire.PropReceipt). A request on a
// non-persistent topic goes to whichever consumer of the shared
// subscription the broker picks, and a replica that is frozen (SIGSTOP, a
// stalled VM, a process stuck in a pause) keeps its consumer, its flow
// permits and thus its share of the requests until the broker's keepalive
// gives up on its connection, a minute or so later; one that was killed
// takes the requests it had with it. A Go SDK instance speaks up for every
// call it takes that asks for a receipt: its reply, or a receipt
// wire.ReceiptAfter after taking it. So a call that has heard nothing for
// longer than its service takes to speak up is on an instance that cannot
// (or its request was dropped on the way), and the bridge publishes it
// once more, same id (a hedge): another instance answers it; one that has
// the call already answers with a receipt or its kept reply and does not
// run it twice. The call takes its replies from the first instance whose
// reply it takes (Call.bind), and once it ends so, a cancel on the
// service's cancel topic tells an instance that still holds the other
// copy not to run it.
//
// How long is too long is learnt per service: the p99 of the time its
// calls took to hear their first word (a receipt, or a reply) over the
// last wordSamples calls, plus a quarter, at least Options.HedgeAfter (a
// call slower than wire.ReceiptAfter hears its receipt just after it)
// and at most Options.RepublishAfter. A service whose instances queue
// calls (every slot busy) speaks up later, and is hedged later. A call is
// hedged at most maxHedges times for its silence alone; an instance's
// leaving may publish it once more (receipt.go). Services that send no
// receipts (TrustGraph's Python services, which never name an instance)
// are never hedged: their silence says nothing.
//
// No call has a timer of its own: a call that asked for a receipt is
// filed, with its deadline and under the same lock, in the deadlines'
// second wheel under the tick its silence would become long
// (deadlines.go), and taken out when it ends. The goroutine that ends
// calls at their deadlines looks at those whose tick came.
//
// An instance is lost when its lease runs out (InstanceLost, from the
// registry: a frozen instance keeps its consumers, and only its lease
// tells), or when it leaves the broker — a kill, a crash — which the
// watch sees on the service's cancel topic, where each Go SDK instance
// keeps a subscription of its own until its calls have ended (a stopping
// instance leaves none behind; watch.go, checkInstances). The calls it
// said it had — by a receipt, or by replies taken from it — and that are
// not over end at once with an InstanceLostError (for the gateway's
// callers UNAVAILABLE, INSTANCE_LOST): it began them, so they may have
// run, in part or whole; a caller may retry them when running them twice
// is harmless (a tool keyed by an idempotency key of its arguments). The
// calls to its service that heard nothing may be published again, as
// after an instance withdrew (InstanceLeft).

// DefaultHedgeAfter is Options.HedgeAfter's default: a call slower than
// wire.ReceiptAfter hears its receipt just after it, and is not published
// again for that.
const DefaultHedgeAfter = wire.ReceiptAfter + 100*time.Millisecond

// maxHedges bounds the times a call is published again for its silence
// alone.
const maxHedges = 2

// maxHolders bounds the instances a call notes as having it (receipts
// naming them): one per publish, and a few forged.
const maxHolders = 4

// wordSamples is how many calls' first words the hedges' delay is
// reckoned from, per service; reckonEvery how many new ones make it
// reckoned again.
const (
	wordSamples = 128
	reckonEvery = 16
)

// ErrInstanceLost means the instance of the tool service that had the
// call — it said so, by a receipt or by replies — is gone without having
// answered it: its lease ran out, or its consumer left the broker. The
// call may have run, in part or whole.
var ErrInstanceLost = errors.New("the tool service instance that had taken the call is gone")

// InstanceLostError ends a call whose instance was lost. It unwraps to
// ErrInstanceLost and, for callers that know only that, to ErrServiceGone
// (for this call, its service is gone).
type InstanceLostError struct {
	Topic    string // the request topic
	Instance string // the instance (wire.PropInstance)
	Why      string // how it was found lost
}

func (e *InstanceLostError) Error() string {
	return "instance " + e.Instance + " of the tool service on " + e.Topic + ", which had taken the call, is gone (" + e.Why +
		"); the call may have run, in part or whole"
}

// Unwrap makes errors.Is(err, ErrInstanceLost) and errors.Is(err,
// ErrServiceGone) true.
func (e *InstanceLostError) Unwrap() []error { return []error{ErrInstanceLost, ErrServiceGone} }

// receiptTopic is what is known of the words of a service that sends
// receipts (Bridge.receipting, by response topic): how long its calls
// took to hear their first word, the last wordSamples of them.
type receiptTopic struct {
	n   atomic.Uint64
	lat [wordSamples]atomic.Int64 // nanoseconds

	mu       sync.Mutex
	after    time.Duration // the hedges' delay, reckoned at n == at
	at       uint64
	reckoned bool
}

// sample notes that a call took d nanoseconds to hear its first word.
// Lock-free: every call answered does it.
func (t *receiptTopic) sample(d int64) {
	if t == nil {
		return
	}
	i := t.n.Add(1) - 1
	t.lat[i%wordSamples].Store(d)
}

// hedgeAfter is how long a call to the service of t may stay silent
// before it is published again: the p99 of its first words plus a
// quarter, within HedgeAfter and RepublishAfter. It is reckoned again
// only once reckonEvery words came since.
func (b *Bridge) hedgeAfter(t *receiptTopic) time.Duration {
	floor := b.opts.HedgeAfter
	ceiling := max(b.opts.RepublishAfter, floor)
	if t == nil {
		return floor
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.n.Load()
	if t.reckoned && n-t.at < reckonEvery {
		return t.after
	}
	var buf [wordSamples]int64
	k := int(min(n, wordSamples))
	for i := range k {
		buf[i] = t.lat[i].Load()
	}
	s := buf[:k]
	slices.Sort(s)
	var p99 time.Duration
	if k > 0 {
		p99 = time.Duration(s[(k*99+99)/100-1])
	}
	t.after = min(max(p99+p99/4, floor), ceiling)
	t.at, t.reckoned = n, true
	return t.after
}

// fileHedge is the tick a call that asks for a receipt is filed under
// first (deadlines.go), made at made (Unix nanoseconds): HedgeAfter
// later, when its silence may first be long; 0 without hedges.
func (b *Bridge) fileHedge(made int64) int64 {
	if b.opts.HedgeAfter <= 0 {
		return 0
	}
	return tickOfNanos(made + int64(b.opts.HedgeAfter))
}

// silent runs on the deadlines' goroutine once call c, which asked for a
// receipt, may have been silent long enough to publish it again: it
// reports whether to (hedge), when the call has heard nothing for its
// service's delay (hedgeAfter) since it was last published, and files it
// again for the next look.
func (c *Call) silent(now time.Time) bool {
	r := c.receipt
	if r == nil || r.word.Load() {
		return false
	}
	b := c.b
	n := now.UnixNano()
	c.mu.Lock()
	if c.ended || c.removed || r.hedges >= maxHedges {
		c.mu.Unlock()
		return false
	}
	last := r.made
	if r.again != 0 {
		last = r.again
	}
	after := b.hedgeAfter(r.topic)
	hedge := false
	switch due := last + int64(after); {
	case n < due:
		b.deadlines.fileAt(c, 0, tickOfNanos(due))
	case !c.taken.Load() || b.down.Load() != nil:
		// Not out yet, or the broker takes nothing now: later.
		b.deadlines.fileAt(c, 0, tickOfNanos(n+int64(b.opts.HedgeAfter)))
	default:
		hedge = true
		r.hedges++
		r.again = n
		if r.hedges < maxHedges {
			b.deadlines.fileAt(c, 0, tickOfNanos(n+int64(after)))
		}
	}
	c.mu.Unlock()
	if hedge {
		b.hedged.Add(1)
		b.hedgeLog.Info("no word of a call from any instance of its service; publishing its request again",
			"id", c.id, "request_topic", c.reqTopic, "silent_for", time.Duration(n-last).Round(time.Millisecond), "hedge", r.hedges)
	}
	return hedge
}

// hedge publishes the calls silent found silent for long, on a goroutine
// of their own: the deadlines' goroutine does not wait for the broker.
// It runs on the deadlines' goroutine, which sweeps counts: Close waits
// for the publishes too.
func (b *Bridge) hedge(calls []*Call) {
	calls = slices.Clone(calls)
	b.sweeps.Add(1)
	go func() {
		defer b.sweeps.Done()
		for _, c := range calls {
			c.publishAgain()
		}
	}()
}

// noteHolder notes that instance inst said, by a receipt, that it has the
// call.
func (c *Call) noteHolder(inst string) {
	r := c.receipt
	if inst == "" || r == nil {
		return
	}
	c.mu.Lock()
	if r.holders == nil {
		r.holders = new([]string)
	}
	if h := *r.holders; len(h) < maxHolders && !slices.Contains(h, inst) {
		*r.holders = append(h, inst)
	}
	c.mu.Unlock()
}

// hedgedAway reports whether the call's request went out more than once:
// another instance may hold a copy of it.
func (c *Call) hedgedAway() bool {
	return c.receipt != nil && c.receipt.sent.Load() > 0
}

// goneError is how a call ends when every consumer of its request topic
// has left (watch.go): InstanceLostError when an instance had taken it —
// bound by its replies, or the one that sent its receipt — since that
// instance is gone with the rest and the call may have run in part;
// ServiceGoneError when no instance is known to have it.
func (c *Call) goneError(topic, why string) error {
	c.mu.Lock()
	inst := ""
	switch {
	case c.instBound.Load():
		inst = c.inst
	case c.receipt != nil && c.receipt.holders != nil && len(*c.receipt.holders) > 0:
		inst = (*c.receipt.holders)[0]
	}
	c.mu.Unlock()
	if inst == "" {
		return &ServiceGoneError{Topic: topic, Why: why}
	}
	c.b.lostCalls.Add(1)
	return &InstanceLostError{Topic: topic, Instance: inst, Why: why}
}

// loseInstance takes instance inst from those the call is known to be on,
// and reports whether none is left: the call was bound to inst by its
// replies, or every instance that sent it a receipt is lost.
func (c *Call) loseInstance(inst string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.ended || c.detached:
		return false
	case c.instBound.Load():
		return c.inst == inst
	case c.bound.Load() || c.receipt == nil:
		return false
	}
	r := c.receipt
	if r.holders == nil {
		return false
	}
	i := slices.Index(*r.holders, inst)
	if i < 0 {
		return false
	}
	*r.holders = slices.Delete(*r.holders, i, i+1)
	return len(*r.holders) == 0
}

// InstanceLost says that instance (wire.PropInstance) of the service on
// requestTopic is gone without having withdrawn: its lease ran out. The
// calls it said it had, and has not answered, end with an
// InstanceLostError; the calls to the service that have heard nothing may
// be published again (InstanceLeft).
func (b *Bridge) InstanceLost(requestTopic, instance string) {
	b.instanceLost(requestTopic, instance, "its lease ran out")
}

// instanceLost is InstanceLost, found by why.
func (b *Bridge) instanceLost(requestTopic, instance, why string) {
	if instance == "" {
		return
	}
	n := 0
	for _, c := range b.pending.collect(func(c *Call) bool {
		return c.reqTopic == requestTopic && (c.receipt != nil || c.instBound.Load())
	}) {
		if c.loseInstance(instance) {
			c.finish(&InstanceLostError{Topic: requestTopic, Instance: instance, Why: why})
			n++
		}
	}
	b.lostCalls.Add(int64(n))
	lvl := b.log.Debug
	if n > 0 {
		lvl = b.log.Warn
	}
	lvl("a tool service instance is gone: the calls it had taken end", "request_topic", requestTopic, "instance", instance,
		"why", why, "calls_ended", n)
	b.InstanceLeft(requestTopic)
}

// cancelSubInfix is what a Go SDK instance's subscription to its
// service's cancel topic has between the service id and its instance
// (toolservice.Service.Run: "<id>-cancel-<instance>").
const cancelSubInfix = "-cancel-"

// instanceOf is the instance whose subscription a consumer of a cancel
// topic is of (transport.Consumer.Name: "<subscription>/<consumer>"); ""
// when it is not a Go SDK instance's.
func instanceOf(c transport.Consumer) string {
	sub, _, _ := strings.Cut(c.Name, "/")
	i := strings.LastIndex(sub, cancelSubInfix)
	if i < 0 {
		return ""
	}
	return sub[i+len(cancelSubInfix):]
}

// instanceWatch is what the watch saw of a service's instances on its
// cancel topic.
type instanceWatch struct {
	present map[string]bool // at the last question
	at      time.Time       // when it was asked
	missing map[string]int  // seen before, missing at this many questions in a row
}

// checkInstances takes the consumers of the cancel topic of requestTopic,
// asked at askedAt: an instance seen there before and missing now is
// lost — at once when the answer is settled (no consumer connected since
// the previous question), else when it is missing at the next question
// too (a topic moving to another broker loses its consumers for a
// moment, and they come back one by one). An instance never seen there
// is not judged: it may not keep such a subscription.
func (b *Bridge) checkInstances(requestTopic string, cs []transport.Consumer, askedAt time.Time) {
	w := b.watch
	now := make(map[string]bool, len(cs))
	for _, c := range cs {
		if inst := instanceOf(c); inst != "" {
			now[inst] = true
		}
	}
	w.instMu.Lock()
	iw := w.instances[requestTopic]
	if iw == nil {
		w.instances[requestTopic] = &instanceWatch{present: now, at: askedAt, missing: map[string]int{}}
		w.instMu.Unlock()
		return
	}
	settled := len(cs) > 0
	for _, c := range cs {
		if c.Since.IsZero() || !c.Since.Before(iw.at) {
			settled = false
		}
	}
	for inst := range iw.present {
		if !now[inst] {
			iw.missing[inst] += 0
		}
	}
	var lost []string
	for inst, k := range iw.missing {
		if now[inst] {
			delete(iw.missing, inst)
			continue
		}
		if k++; settled || k >= 2 {
			lost = append(lost, inst)
			delete(iw.missing, inst)
		} else {
			iw.missing[inst] = k
		}
	}
	iw.present, iw.at = now, askedAt
	w.instMu.Unlock()
	for _, inst := range lost {
		b.instanceLost(requestTopic, inst, "its consumer left the broker")
	}
}

// WatchedInstances lists, sorted, the instances of the service on
// requestTopic that the watch saw at its last question about them (their
// subscriptions to the service's cancel topic); none without
// Options.Watch, or before calls to a service that sends receipts made it
// ask.
func (b *Bridge) WatchedInstances(requestTopic string) []string {
	if b.watch == nil {
		return nil
	}
	w := b.watch
	w.instMu.Lock()
	defer w.instMu.Unlock()
	iw := w.instances[requestTopic]
	if iw == nil {
		return nil
	}
	out := make([]string, 0, len(iw.present))
	for inst := range iw.present {
		out = append(out, inst)
	}
	slices.Sort(out)
	return out
}
