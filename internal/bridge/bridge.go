// Package bridge turns calls into request/reply exchanges over a message
// broker: it publishes a tool-service envelope on the request topic with a
// fresh correlation id, listens once per response topic (and on the
// instance's own reply topic, which requests name in their reply-to
// property), and routes every reply chunk to the call waiting for that id,
// whichever topic it came on. It knows nothing of tools, gRPC or HTTP.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/randid"
	"github.com/toolgate/toolgate/internal/ratelog"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// Errors a call can end with, besides a *wire.Error from the tool service
// and the context's own errors.
var (
	// ErrUnavailable: the broker could not take the request.
	ErrUnavailable = errors.New("tool service unavailable")
	// ErrOverloaded: too many calls are in flight, or the publish queue is full.
	ErrOverloaded = errors.New("gateway overloaded")
	// ErrBadReply: the tool service answered with something that is not a
	// tool-service response.
	ErrBadReply = errors.New("malformed reply from tool service")
	// ErrSlowReader: the caller read the reply chunks too slowly and the
	// buffer for them filled up.
	ErrSlowReader = errors.New("reply chunks not read fast enough")
	// ErrLostReplies: reply messages of a call never arrived (see
	// LostRepliesError).
	ErrLostReplies = errors.New("reply messages lost in transit")
	// ErrClosed: the bridge is shutting down.
	ErrClosed = errors.New("bridge closed")
	// ErrNoListener: no tool service is subscribed to the request topic,
	// so a request would be dropped by the broker.
	ErrNoListener = errors.New("no tool service is listening")
	// ErrBrokerDown: the broker does not take messages now (BrokerDown);
	// it wraps ErrUnavailable.
	ErrBrokerDown = fmt.Errorf("%w: the message broker does not take messages", ErrUnavailable)
	// ErrServiceBusy: the tool service had Options.MaxInFlightPerService
	// calls in flight for the whole of Options.ServiceQueueWait. It wraps
	// ErrOverloaded.
	ErrServiceBusy = fmt.Errorf("%w: the tool service has too many calls in flight", ErrOverloaded)
)

// Presence tells whether a topic has consumers. The bridge asks it before
// publishing, to fail at once instead of waiting for a deadline when nobody
// listens on a non-persistent topic.
type Presence interface {
	Subscribed(ctx context.Context, topic string) (bool, error)
}

// Target is where a call goes.
type Target struct {
	RequestTopic  string
	ResponseTopic string
}

// DefaultMaxInFlight is Options.MaxInFlight's default.
const DefaultMaxInFlight = 100000

// Defaults of the per-service bound and of flow control.
const (
	// DefaultMaxInFlightPerService is Options.MaxInFlightPerService's
	// default: below the request queue of a TrustGraph Python service
	// (the Pulsar client's 1000) and of a Go SDK service (10,000), so
	// that one gateway alone cannot overflow either.
	DefaultMaxInFlightPerService = 1000
	// DefaultServiceQueueWait is Options.ServiceQueueWait's default.
	DefaultServiceQueueWait = 3 * time.Second
	// DefaultStreamWindow is Options.StreamWindow's default.
	DefaultStreamWindow = 1024
	// DefaultStreamBudget is Options.StreamBudget's default: below half
	// the reply consumer's prefetch queue (10,000 in the gateway), as the
	// client gives the broker its permits back half a queue at a time,
	// and the broker drops what a consumer has no permit for.
	DefaultStreamBudget = 4096
	// DefaultStreamBudgetBytes is Options.StreamBudgetBytes' default: the
	// broker drops the non-persistent messages meant for a connection
	// whose unsent bytes passed its pulsarChannelWriteBufferHighWaterMark
	// (64 KiB by default), a whole batch of them at a time, and a gateway
	// starved of CPU reads its connection late, its socket buffers full.
	// Credit within that mark never brings the broker there, whatever the
	// socket buffers.
	DefaultStreamBudgetBytes = 64 << 10
	// regrantAfter: a stream that has had no chunk for this long while
	// waiting is sent its grant again (in case the last one was lost).
	regrantAfter = 500 * time.Millisecond
	// starvedRetry: a stream whose credit is used up, waiting for room in
	// the budget, looks for some again this often.
	starvedRetry = 10 * time.Millisecond
	// replyBytesGuess is what a reply message is taken to weigh before
	// one of the call's arrived.
	replyBytesGuess = 256
	// firstCredit is the credit a call is given with its request: every
	// call may be answered in chunks, most are answered in one message, so
	// each starts with little (200 calls at once: 1,600 messages, well
	// within the consumer's permits), and a stream gets its share of the
	// budgets from its first chunk read on.
	firstCredit = 8
)

// Options tune a Bridge.
type Options struct {
	// Logger for the bridge's own events (default: discard).
	Logger *slog.Logger
	// MaxInFlight bounds the calls waiting for replies (default
	// DefaultMaxInFlight).
	MaxInFlight int
	// MaxBufferedChunks bounds the reply chunks held for one call that its
	// reader has not taken yet (default 4096).
	MaxBufferedChunks int
	// SubscriptionPrefix names this instance's response subscriptions; a
	// random suffix makes them unique (default "toolgate").
	SubscriptionPrefix string
	// OnPublish, when set, wraps each publish: it may add message
	// properties (a traceparent) and returns the context to publish with
	// and a function told the outcome (to end a span).
	OnPublish func(ctx context.Context, topic string, props map[string]string) (context.Context, func(error))
	// Presence, when set, is asked before each publish whether the request
	// topic has a subscriber; calls to a topic without one fail with
	// ErrNoListener.
	Presence Presence
	// MaxInFlightPerService bounds the calls in flight to one tool
	// service (request topic) from this instance (default
	// DefaultMaxInFlightPerService; negative: no bound). A request topic
	// is non-persistent: what a service's consumer has no room for the
	// broker drops, and that call would hear nothing until its deadline.
	// Calls beyond the bound wait for a free slot, at most
	// ServiceQueueWait and never past their deadline, then fail with
	// ErrServiceBusy.
	MaxInFlightPerService int
	// ServiceQueueWait is how long a call waits for a free slot of its
	// service (default DefaultServiceQueueWait).
	ServiceQueueWait time.Duration
	// StreamWindow is the flow control of streamed replies: a service that
	// honours it (wire.PropCredit; the Go SDK does) sends at most this
	// many reply messages ahead of what the call's reader has taken, and
	// waits for more credit instead of the broker dropping what the
	// gateway could not take yet (default DefaultStreamWindow; negative:
	// no flow control). It must be below MaxBufferedChunks.
	StreamWindow int
	// StreamBudget bounds the credit of all streams together, in reply
	// messages (default DefaultStreamBudget), and StreamBudgetBytes in
	// bytes, reckoned from the size of each call's reply messages so far
	// (default DefaultStreamBudgetBytes): every call, unary or stream, may
	// be answered in chunks, so each starts with a little credit (8
	// messages; a stream's call, CallOptions.Stream, its share at once),
	// and from its first chunk on gets its share of both;
	// grants never take the total past them, but a stream with no credit
	// left always gets a message.
	StreamBudget      int
	StreamBudgetBytes int
	// ReplyTopic, when set, is this instance's own reply topic: every
	// request names it (wire.PropReplyTo), and the bridge listens on it as
	// well as on each response topic. Services that honour reply-to answer
	// there, so a reply reaches this instance only; those that do not keep
	// answering on the response topic, which every instance receives.
	// Replies are routed by id whichever topic they come on.
	ReplyTopic string
	// Watch, when set, is asked every WatchEvery, while calls are in
	// flight, which consumers their request topics have; calls whose
	// consumers are gone end with ErrServiceGone (see watch.go for
	// exactly which).
	Watch Watcher
	// WatchEvery is the watch's period (default DefaultWatchEvery).
	WatchEvery time.Duration
	// RepublishAfter is how long a call that asked its service for a
	// receipt (wire.PropReceipt) waits for a word of it — a receipt or a
	// reply — before its request may be published again, should an
	// instance of the service have left meanwhile (receipt.go; default
	// DefaultRepublishAfter; negative: no receipts asked for). It also
	// bounds how long a call may stay silent before it is hedged.
	RepublishAfter time.Duration
	// HedgeAfter is the least time a call that asked for a receipt must
	// have heard nothing — no receipt, no reply — before its request is
	// published once more (a hedge, hedge.go): the delay is learnt per
	// service, the p99 of the time its calls took to hear a first word
	// plus a quarter, and kept within HedgeAfter and RepublishAfter
	// (default DefaultHedgeAfter; negative: no hedges, a call is published
	// again only after an instance of its service left). Below
	// wire.ReceiptAfter, calls slower than that would be published again
	// just before their receipt arrives.
	HedgeAfter time.Duration
}

// Stats are counters for metrics.
type Stats struct {
	InFlight      int64 // calls waiting for replies now
	Published     int64 // requests published
	PublishErrors int64 // requests the broker did not take
	Replies       int64 // reply chunks delivered to a waiting call
	OrphanReplies int64 // replies for no waiting call (late, cancelled, or another instance's)
	BadReplies    int64 // replies that could not be decoded
	// RefusedReplies are replies for a waiting call that the bridge did
	// not take: from a topic where that call's replies are not expected,
	// a number the call had already had (a replay), none from a service
	// that numbers its replies, or from another instance than the one
	// whose replies the call took (receipts too).
	RefusedReplies int64
	// RepliesViaReplyTo counts the replies (of Replies and OrphanReplies)
	// that came on the instance's own reply topic.
	RepliesViaReplyTo int64
	// Streams are the flow-controlled streams now; Grants the grants sent
	// to their services (a stream's cancel included); Busy the calls
	// refused with ErrServiceBusy.
	Streams, Grants, Busy int64
	// CreditBytes is the flow-control budget the calls in flight hold now
	// (within Options.StreamBudgetBytes, but for a message of credit each).
	CreditBytes int64
	// Cancels are the calls given up whose services were told so on
	// their cancel topics (wire.CancelTopic); Resends the calls whose
	// services were asked for their last reply again there
	// (wire.CreditResend), this bridge's consumer of it having been away.
	Cancels, Resends int64
	// Receipts are the receipts taken (wire.PropReceipt); Republished the
	// requests published again, heard nothing of for long (Hedged of
	// them) or after an instance of their service left.
	Receipts, Republished, Hedged int64
	// InstanceLost counts the calls ended with an InstanceLostError: the
	// instance that had them was lost.
	InstanceLost int64
}

// Bridge correlates requests and replies. It is safe for concurrent use.
type Bridge struct {
	broker transport.Broker
	// publish sends a request: the broker's PublishInline where it has
	// one, else its PublishAsync.
	publish func(ctx context.Context, topic string, msg transport.Message, done func(error)) error
	log     *slog.Logger
	opts    Options
	subID   string
	// counter, when the watch has one, checks the unnumbered streams'
	// topics for drops (checkHeld).
	counter DeliveryCounter

	mu     sync.RWMutex
	topics map[string]*listener // response topic → its subscription
	closed bool

	pending pendingMap
	// deadlines are the calls' own deadlines, kept by one goroutine
	// (expireCalls, one of sweeps); ticked is when it last ticked (Unix
	// nanoseconds), a clock of deadlineTick's resolution while calls are
	// filed.
	deadlines deadlines
	ticked    atomic.Int64
	track     tracker
	// honouring holds the response topics whose services have answered on
	// ReplyTopic (response topic → struct{}).
	honouring sync.Map

	inFlight      atomic.Int64
	published     atomic.Int64
	publishErrors atomic.Int64
	replies       atomic.Int64
	orphans       atomic.Int64
	badReplies    atomic.Int64
	refused       atomic.Int64
	// numbering holds the response topics whose services number their
	// replies (wire.PropSeq), as seen; a call is judged by its own first
	// reply (Call.bind), since one service may have replicas of both kinds.
	numbering  sync.Map
	viaReplyTo atomic.Int64
	// receipting holds the response topics whose services name their
	// instance on replies, and so send receipts (response topic →
	// struct{}); left, per request topic, when an instance of its service
	// last left (*atomic.Int64 of Unix nanoseconds); receipt.go.
	receipting  sync.Map
	left        sync.Map
	receipts    atomic.Int64
	republished atomic.Int64
	hedged      atomic.Int64
	lostCalls   atomic.Int64
	// hedgeLog logs the hedges, a line a message per interval: a frozen
	// replica has every call it gets hedged.
	hedgeLog *slog.Logger
	// lastLeft is when an instance last left (Unix nanoseconds);
	// sweeping, that a sweep runs (receipt.go).
	lastLeft atomic.Int64
	sweeping atomic.Bool
	// closing is closed by Close; sweeps, the sweeps running and
	// expireCalls (Close waits for them).
	closing chan struct{}
	sweeps  sync.WaitGroup

	// services holds each request topic's slots (chan struct{} of
	// MaxInFlightPerService).
	services sync.Map
	streams  atomic.Int64
	// creditMu guards the credit the streams hold together, in bytes and
	// in messages (Call.reserved, Call.reservedMsgs), within
	// StreamBudgetBytes and StreamBudget; reserved is the bytes, for
	// Stats.
	creditMu      sync.Mutex
	reservedBytes int64
	reservedMsgs  int64
	reserved      atomic.Int64
	grants        atomic.Int64
	busy          atomic.Int64
	cancels       atomic.Int64
	resends       atomic.Int64

	// down holds why the broker is found not to take messages (nil while
	// it does): calls are refused at once meanwhile (BrokerDown).
	down atomic.Pointer[error]
	// lastTaken is when the broker last took a request (unix nanoseconds).
	lastTaken atomic.Int64

	// epoch counts the watch's questions; each call notes it when made.
	epoch atomic.Uint64
	watch *watch // nil without Options.Watch
}

type listener struct {
	ready chan struct{}
	sub   transport.Subscription
	err   error
}

// New returns a Bridge over broker.
func New(broker transport.Broker, opts Options) *Bridge {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.MaxBufferedChunks <= 0 {
		opts.MaxBufferedChunks = 4096
	}
	if opts.SubscriptionPrefix == "" {
		opts.SubscriptionPrefix = "toolgate"
	}
	if opts.MaxInFlightPerService == 0 {
		opts.MaxInFlightPerService = DefaultMaxInFlightPerService
	}
	if opts.ServiceQueueWait <= 0 {
		opts.ServiceQueueWait = DefaultServiceQueueWait
	}
	if opts.StreamWindow == 0 {
		opts.StreamWindow = DefaultStreamWindow
	}
	opts.StreamWindow = min(opts.StreamWindow, opts.MaxBufferedChunks-1)
	if opts.StreamBudget <= 0 {
		opts.StreamBudget = DefaultStreamBudget
	}
	if opts.StreamBudgetBytes <= 0 {
		opts.StreamBudgetBytes = DefaultStreamBudgetBytes
	}
	if opts.WatchEvery <= 0 {
		opts.WatchEvery = DefaultWatchEvery
	}
	if opts.RepublishAfter == 0 {
		opts.RepublishAfter = DefaultRepublishAfter
	}
	if opts.HedgeAfter == 0 {
		opts.HedgeAfter = DefaultHedgeAfter
	}
	b := &Bridge{
		broker:  broker,
		publish: broker.PublishAsync,
		log:     opts.Logger,
		opts:    opts,
		subID:   opts.SubscriptionPrefix + "-" + newID()[:12],
		topics:  map[string]*listener{},
		closing: make(chan struct{}),
	}
	b.hedgeLog = slog.New(ratelog.NewHandler(opts.Logger.Handler(), 0))
	if ip, ok := broker.(transport.InlinePublisher); ok {
		b.publish = ip.PublishInline
	}
	b.pending.init()
	b.deadlines.init()
	b.sweeps.Add(1)
	go b.expireCalls()
	if opts.Watch != nil {
		b.counter, _ = opts.Watch.(DeliveryCounter)
		b.startWatch()
	}
	return b
}

// Stats returns the current counters.
func (b *Bridge) Stats() Stats {
	return Stats{
		InFlight:      b.inFlight.Load(),
		Published:     b.published.Load(),
		PublishErrors: b.publishErrors.Load(),
		Replies:       b.replies.Load(),
		OrphanReplies: b.orphans.Load(),
		BadReplies:    b.badReplies.Load(),

		RefusedReplies: b.refused.Load(),

		RepliesViaReplyTo: b.viaReplyTo.Load(),

		Streams:     b.streams.Load(),
		CreditBytes: b.reserved.Load(),
		Grants:      b.grants.Load(),
		Busy:        b.busy.Load(),
		Cancels:     b.cancels.Load(),
		Resends:     b.resends.Load(),
		Receipts:    b.receipts.Load(),
		Republished: b.republished.Load(),
		Hedged:      b.hedged.Load(),

		InstanceLost: b.lostCalls.Load(),
	}
}

// ReplyTopic is the instance's own reply topic ("" without one).
func (b *Bridge) ReplyTopic() string { return b.opts.ReplyTopic }

// Subscription is the name of this bridge's subscriptions to response
// topics and its reply topic, as the broker's topic stats show it.
func (b *Bridge) Subscription() string { return b.subID }

// Honouring lists, sorted, the response topics whose services have been
// seen answering on the instance's reply topic: they honour reply-to. It
// is what this instance observed, not a promise: a service with replicas
// of both kinds answers on both topics, and either way the reply arrives.
func (b *Bridge) Honouring() []string {
	out := []string{}
	b.honouring.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
	slices.Sort(out)
	return out
}

// Listen makes sure this instance is subscribed to a response topic. Call
// performs it on demand; calling it ahead saves the first call the wait.
func (b *Bridge) Listen(ctx context.Context, responseTopic string) error {
	return b.listen(ctx, responseTopic, true)
}

// listen is Listen; with detach the subscription is made to the end even
// if ctx ends first (a call's context must not cut it short for the
// others), without it ctx ends it too (the background work's).
func (b *Bridge) listen(ctx context.Context, responseTopic string, detach bool) error {
	// Fast path, every call: the subscription exists already.
	b.mu.RLock()
	l := b.topics[responseTopic]
	b.mu.RUnlock()
	if l != nil {
		select {
		case <-l.ready:
			if l.err == nil {
				return nil
			}
		default:
		}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	l = b.topics[responseTopic]
	if l == nil {
		l = &listener{ready: make(chan struct{})}
		b.topics[responseTopic] = l
		b.mu.Unlock()
		// Subscribe outside the lock; others wait on ready. The
		// subscription outlives the ctx of the call that created it.
		parent := ctx
		if detach {
			parent = context.WithoutCancel(ctx)
		}
		sctx, cancel := context.WithTimeout(parent, 30*time.Second)
		l.sub, l.err = b.broker.Subscribe(sctx, responseTopic, b.subID, transport.Transient,
			func(m transport.Message) { b.route(responseTopic, m) })
		cancel()
		if l.err != nil {
			b.mu.Lock()
			delete(b.topics, responseTopic)
			b.mu.Unlock()
			b.log.Warn("cannot subscribe to response topic", "topic", responseTopic, "err", l.err)
		} else {
			b.log.Debug("subscribed to response topic", "topic", responseTopic, "subscription", b.subID)
			b.sampleNew(parent, responseTopic)
		}
		b.noteListen(responseTopic, l.err)
		close(l.ready)
	} else {
		b.mu.Unlock()
	}
	select {
	case <-l.ready:
		if l.err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, l.err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CallOptions change what Call sends; the zero value is a plain call.
type CallOptions struct {
	// Deadline is a deadline of the call's own, besides ctx's: the
	// message carries the earlier of the two, and Recv abandons the call
	// when it passes. A caller that has no deadline in ctx saves a
	// context and its timer this way: the publish is bounded by the
	// deadline the message carries (transport.Message.Deadline). Zero is
	// none.
	Deadline time.Time
	// ID is the request's correlation id (default: a fresh random one).
	// The caller makes sure no other call has it.
	ID string
	// ReplyTo, when set, names the topic the service should answer on
	// instead of the instance's reply topic. Replies that arrive there are
	// for whoever reads that topic; the call still takes replies on the
	// service's response topic (from services that ignore reply-to).
	ReplyTo string
	// NoCredit sends the request without flow control: the service
	// answers without waiting for grants.
	NoCredit bool
	// Detached: the call's end never tells the service (no cancel when it
	// is closed, given up or the bridge shuts down). For a request that
	// outlives this gateway, a durable operation, whose cancels are sent
	// by whoever cancels it.
	Detached bool
	// Stream: the caller reads the answer as a stream, likely of many
	// messages. The request carries a stream's share of the credit
	// budgets (taken from them, as a grant would be) rather than the few
	// messages any call starts with: the service need not wait a round
	// trip through the broker for its first grant.
	Stream bool
	// Caller is the request's caller assertion (wire.PropCaller), signed
	// for ID; "": none.
	Caller string
}

// Call publishes req to t.RequestTopic and returns the call, whose replies
// are read with Recv. The caller must Close the call when done with it. The
// context bounds the publish; the earlier of ctx's deadline and
// o.Deadline, if any, is written into the message so the service can drop
// stale work. Call returns once the request is queued; a publish that
// fails later ends the call with the error Call would have returned.
func (b *Bridge) Call(ctx context.Context, t Target, req wire.Request, o CallOptions) (*Call, error) {
	deadline := o.Deadline
	if err := b.down.Load(); err != nil {
		return nil, *err
	}
	if err := b.Listen(ctx, t.ResponseTopic); err != nil {
		return nil, err
	}
	if b.opts.ReplyTopic != "" && o.ReplyTo == "" {
		// Subscribed before the request is out, so no reply can be missed.
		if err := b.Listen(ctx, b.opts.ReplyTopic); err != nil {
			return nil, err
		}
	}
	if p := b.opts.Presence; p != nil {
		ok, err := p.Subscribed(ctx, t.RequestTopic)
		if err != nil {
			b.log.Debug("cannot tell whether the request topic has subscribers; publishing anyway", "topic", t.RequestTopic, "err", err)
		} else if !ok {
			return nil, fmt.Errorf("%w on %s", ErrNoListener, t.RequestTopic)
		}
	}
	if n := b.inFlight.Add(1); n > int64(b.opts.MaxInFlight) {
		b.inFlight.Add(-1)
		return nil, fmt.Errorf("%w: %d calls in flight", ErrOverloaded, n-1)
	}
	slot, err := b.acquire(ctx, t.RequestTopic, deadline)
	if err != nil {
		b.inFlight.Add(-1)
		return nil, err
	}
	payload := wire.EncodeRequest(req)
	id := o.ID
	if id == "" {
		id = newID()
	}
	c := &Call{b: b, id: id, notify: make(chan struct{}, 1), respTopic: t.ResponseTopic, reqTopic: t.RequestTopic,
		deadline: deadline, slot: slot, epoch: b.epoch.Load(), detached: o.Detached, caller: o.Caller}
	if b.watch != nil {
		c.made = time.Now() // only the watch reads it
	}
	if dl, ok := ctx.Deadline(); ok && (deadline.IsZero() || !dl.After(deadline)) {
		deadline, c.deadline = dl, time.Time{} // ctx's comes first: not filed under its own
	}
	switch {
	case o.ReplyTo != "":
		c.replyTo = o.ReplyTo
	case b.opts.ReplyTopic != "":
		c.replyTo = b.opts.ReplyTopic
	}
	if b.opts.StreamWindow > 0 && !o.NoCredit {
		c.est, c.credited = replyBytesGuess, true
		c.granted = min(firstCredit, b.opts.StreamWindow)
		if o.Stream {
			c.granted = max(c.granted, c.firstGrant())
		}
	}
	c.sentDeadline = deadline
	// Not for calls whose replies go to another reader's topic (durable
	// operations): receipts are for this bridge's calls.
	var words *receiptTopic
	if o.ReplyTo == "" && !o.Detached {
		words = b.wantsReceipts(t.ResponseTopic)
	}
	receipt := words != nil
	props := c.requestProps(c.granted, receipt)
	msg := transport.Message{Payload: payload, Properties: props, Deadline: c.deadline}
	var dlTick, hedgeTick int64
	if receipt {
		c.armReceipt(payload, c.granted, words)
		hedgeTick = b.fileHedge(c.receipt.made)
	}
	nprops := len(props)
	b.pending.store(c.id, c)
	if !c.deadline.IsZero() {
		dlTick = tickOf(c.deadline)
	}
	if dlTick != 0 || hedgeTick != 0 {
		c.wheeled = true
		b.deadlines.fileAt(c, dlTick, hedgeTick)
	}
	if err := b.down.Load(); err != nil {
		// Found down since the check above, perhaps before BrokerDown
		// saw this call: not published.
		c.end(*err, false)
		return nil, *err
	}
	pctx, done := ctx, func(error) {}
	if b.opts.OnPublish != nil {
		pctx, done = b.opts.OnPublish(ctx, t.RequestTopic, props)
		if c.receipt != nil && len(props) != nprops {
			c.receipt.props = props // a trace context: sent again as it was
		}
	}
	// The caller does not wait for the broker's receipt through another
	// goroutine (one wake-up less per call): a failure that arrives later
	// ends the call, and its reader sees it from Recv. Where the broker can
	// send on this goroutine when idle, it does (one hand-off less again).
	// The publish ends by the call's own deadline too (ctx's, when that
	// comes first): while a broker fails over, the broker's receipt can be
	// longer in coming than the call may last.
	err = b.publish(pctx, t.RequestTopic, msg, func(err error) {
		done(err)
		if err != nil {
			b.publishErrors.Add(1)
			c.end(publishError(err), false)
			return
		}
		c.taken.Store(true)
		b.lastTaken.Store(time.Now().UnixNano())
		b.published.Add(1)
	})
	if err != nil {
		done(err)
		b.publishErrors.Add(1)
		c.end(context.Canceled, false)
		return nil, publishError(err)
	}
	return c, nil
}

// BrokerDown says that the broker does not take messages: a probe sent
// at since had no receipt in time (cause says what happened). Unless the
// broker took a request of this bridge after since — then it is there,
// and false is returned — calls are refused at once with ErrBrokerDown
// until BrokerUp, and the calls in flight whose request the broker has
// not taken end with it (CallOptions.Detached ones excepted): their
// request may never have left. A broker that can (pulsarbroker.Pulsar's
// SetReachable) stops waiting for receipts meanwhile, so that no caller
// is held in a publish. Calls whose request was taken wait on: their
// service may answer once the broker is back.
func (b *Bridge) BrokerDown(cause error, since time.Time) bool {
	if b.lastTaken.Load() > since.UnixNano() {
		return false
	}
	err := fmt.Errorf("%w (%w)", ErrBrokerDown, cause)
	first := b.down.Swap(&err) == nil
	if r, ok := b.broker.(reachability); ok {
		r.SetReachable(false)
	}
	n := 0
	b.pending.each(func(c *Call) {
		if !c.detached && !c.taken.Load() {
			c.end(err, false)
			n++
		}
	})
	if first || n > 0 {
		b.log.Warn("the broker does not take messages: calls are refused until it does", "err", cause, "calls_ended", n)
	}
	return true
}

// BrokerUp says that the broker takes messages again (a probe had its
// receipt): calls are served again.
func (b *Bridge) BrokerUp() {
	if r, ok := b.broker.(reachability); ok {
		r.SetReachable(true)
	}
	if b.down.Swap(nil) != nil {
		b.log.Info("the broker takes messages again: calls are served")
	}
}

// reachability is a broker told whether the broker can be reached
// (pulsarbroker.Pulsar).
type reachability interface {
	SetReachable(ok bool)
}

// acquire takes a slot of the service on topic for one call, waiting for
// one at most ServiceQueueWait and not past deadline (nor ctx's). It
// returns the slots to give the slot back to (nil: no bound).
func (b *Bridge) acquire(ctx context.Context, topic string, deadline time.Time) (chan struct{}, error) {
	if b.opts.MaxInFlightPerService < 0 {
		return nil, nil
	}
	v, ok := b.services.Load(topic)
	if !ok {
		v, _ = b.services.LoadOrStore(topic, make(chan struct{}, b.opts.MaxInFlightPerService))
	}
	slots := v.(chan struct{})
	select {
	case slots <- struct{}{}:
		return slots, nil
	default:
	}
	wait := b.opts.ServiceQueueWait
	if dl, ok := ctx.Deadline(); ok && (deadline.IsZero() || dl.Before(deadline)) {
		deadline = dl
	}
	if !deadline.IsZero() {
		// Leave the call time to be answered: a call that got its slot
		// just before its deadline would only time out.
		wait = min(wait, time.Until(deadline)/2)
	}
	if wait > 0 {
		t := getTimer(wait)
		defer putTimer(t)
		select {
		case slots <- struct{}{}:
			return slots, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	b.busy.Add(1)
	return nil, fmt.Errorf("%w (%d to %s; waited %v for a free slot)", ErrServiceBusy, cap(slots), topic, wait.Round(time.Millisecond))
}

// window is the credit a stream whose reply messages weigh est bytes
// each should have now: StreamWindow, or its share of the budgets among
// the streams; at least 1.
func (b *Bridge) window(est int64) int64 {
	n := max(b.streams.Load(), 1)
	w := min(int64(b.opts.StreamWindow), int64(b.opts.StreamBudget)/n, int64(b.opts.StreamBudgetBytes)/(n*est))
	return max(w, 1)
}

// sendGrant tells the service on flow that call id may send reply
// messages numbered below limit, or (limit < 0) that the caller is gone.
// Grants are small and cumulative, so one that is lost is made good by
// the next; they go out on a goroutine of their own, as the first one to
// a service instance waits for its producer.
func (b *Bridge) sendGrant(flow, id string, limit int) {
	credit := wire.CreditCancel
	if limit >= 0 {
		credit = strconv.Itoa(limit)
	}
	b.grants.Add(1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.broker.Publish(ctx, flow, transport.Message{Payload: []byte(credit), Properties: map[string]string{wire.PropID: id, wire.PropCredit: credit}}); err != nil {
			b.log.Debug("cannot send a stream's grant", "flow_topic", flow, "id", id, "err", err)
		}
	}()
}

// sendCancel tells the service on requestTopic that call id is given up,
// on its cancel topic (wire.CancelTopic), for when the call's instance is
// not known (a unary call, a stream before its first chunk): each
// instance of a Go SDK service reads it, and the one running the call
// ends its context. Services that do not read it (TrustGraph's Python
// ones) run the call to its end, as before. It costs one message per call
// given up, none for the others.
func (b *Bridge) sendCancel(requestTopic, id string) {
	b.cancels.Add(1)
	topic := wire.CancelTopic(requestTopic)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.broker.Publish(ctx, topic, transport.Message{Payload: []byte(wire.CreditCancel), Properties: map[string]string{wire.PropID: id, wire.PropCredit: wire.CreditCancel}}); err != nil {
			b.log.Debug("cannot tell a tool service that a call was given up", "cancel_topic", topic, "id", id, "err", err)
		}
	}()
}

// sendResend asks the service on requestTopic, on its cancel topic, for
// the last reply of call id once more (wire.CreditResend).
func (b *Bridge) sendResend(requestTopic, id string) {
	b.resends.Add(1)
	topic := wire.CancelTopic(requestTopic)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.broker.Publish(ctx, topic, transport.Message{Payload: []byte(wire.CreditResend), Properties: map[string]string{wire.PropID: id, wire.PropCredit: wire.CreditResend}}); err != nil {
			b.log.Debug("cannot ask a tool service for a reply again", "cancel_topic", topic, "id", id, "err", err)
		}
	}()
}

// publishError says what a failed publish means for the call.
func publishError(err error) error {
	switch {
	case errors.Is(err, transport.ErrQueueFull):
		return fmt.Errorf("%w: %w", ErrOverloaded, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

// route hands one reply message to the call waiting for its id. The bus
// is a trust boundary: a reply is taken only from where the call's
// replies are expected — this instance's reply topic, or the called
// service's response topic — and, once a call has had a reply, only from
// the topic of that first reply, numbered (wire.PropSeq) as that first
// one was or not, and only with the number due next or a later one (a gap
// is lost replies). One service may have replicas of both kinds on one
// request topic: Go SDK replicas answer on the reply topic, numbered;
// TrustGraph's Python replicas ignore reply-to and answer on the response
// topic, unnumbered. So each call binds to the kind of its first reply
// taken, and to the instance (wire.PropInstance) of the first taken that
// names one (Call.bind). A message refused, and a receipt, bind nothing:
// neither, forged, can have the genuine answer refused after it.
// On the response topic of a service seen answering on the reply topic, a
// numbered reply to a call that named the reply topic is refused: the Go
// SDK answers such a call on the reply topic only. Anything else refused
// is counted and logged, and the call goes on.
func (b *Bridge) route(topic string, m transport.Message) {
	id := m.Properties[wire.PropID]
	viaReplyTo := topic == b.opts.ReplyTopic && topic != ""
	if viaReplyTo {
		b.viaReplyTo.Add(1)
	}
	c := b.pending.load(id)
	if c == nil {
		b.orphans.Add(1)
		return
	}
	inst := m.Properties[wire.PropInstance]
	if m.Properties[wire.PropReceipt] != "" {
		b.routeReceipt(topic, c, viaReplyTo, inst)
		return
	}
	seq := m.Properties[wire.PropSeq]
	if !viaReplyTo {
		if topic != c.respTopic {
			b.refuse(topic, id, "the reply came from a topic where this call's replies are not expected", "response_topic", c.respTopic)
			return
		}
		if _, honours := b.honouring.Load(c.respTopic); honours && seq != "" && c.replyTo == b.opts.ReplyTopic && c.replyTo != "" {
			b.refuse(topic, id, "a numbered reply on the response topic of a service that answers on the reply topic", "response_topic", c.respTopic)
			return
		}
	} else if seq == "" {
		b.refuse(topic, id, "the reply has no sequence number, though it came on the reply topic")
		return
	}
	// Checked before the payload is decoded (deliver checks again, and
	// binds): a message refused here is not read.
	if why := c.mismatch(topic, seq != "", inst); why != "" {
		b.refuseFor(c, topic, why, "response_topic", c.respTopic)
		return
	}
	resp, err := wire.DecodeResponse(m.Payload)
	if err != nil {
		b.badReplies.Add(1)
		b.log.Warn("malformed reply", "topic", topic, "id", id, "err", err, "bytes", len(m.Payload))
		c.finish(fmt.Errorf("%w: %w", ErrBadReply, err))
		return
	}
	flow := m.Properties[wire.PropFlow]
	switch d, why := c.deliver(resp, topic, seq, flow, inst, len(m.Payload)+len(id)+len(seq)+len(flow)+replyOverhead); d {
	case delivered:
	case mismatched:
		b.refuseFor(c, topic, why, "response_topic", c.respTopic)
		return
	case badFlow:
		b.refuse(topic, id, "the reply names a flow topic that is not its service's", "flow_topic", flow)
		c.finish(fmt.Errorf("%w: flow topic %q is not one of %s", ErrBadReply, flow, c.reqTopic))
		return
	case replayed:
		b.refuse(topic, id, "the reply repeats a sequence number the call already had", "seq", seq)
		return
	case late:
		b.orphans.Add(1)
		return
	}
	b.replies.Add(1)
}

// learn notes what a reply message call c took — from topic, numbered or
// not, naming instance inst — shows of its service, learnt from the
// replies taken only (Call.deliver), before the caller can see it: the
// caller's next call acts on it.
func (b *Bridge) learn(c *Call, topic string, numbered bool, inst string) {
	c.heardWord()
	if inst != "" {
		b.learnReceipts(c.respTopic)
	}
	if numbered {
		if _, ok := b.numbering.Load(c.respTopic); !ok {
			b.numbering.Store(c.respTopic, struct{}{})
		}
	}
	if topic == b.opts.ReplyTopic && topic != "" {
		if _, ok := b.honouring.Load(c.respTopic); !ok {
			b.honouring.Store(c.respTopic, struct{}{})
			b.log.Info("tool service answers on this instance's reply topic", "response_topic", c.respTopic, "reply_topic", topic)
		}
	}
}

// replyOverhead is what a reply message weighs on the wire besides its
// payload and property values: the property names and the message's
// metadata in a batch, roughly.
const replyOverhead = 48

// refuse counts and logs a reply the bridge does not take.
func (b *Bridge) refuse(topic, id, why string, attrs ...any) {
	b.refused.Add(1)
	b.log.Warn("reply refused: "+why, append([]any{"topic", topic, "id", id}, attrs...)...)
}

// refuseFor is refuse for a message of call c not like the reply it took:
// of a call published more than once, the other instance's answer is to
// be expected, and is logged at debug level only.
func (b *Bridge) refuseFor(c *Call, topic, why string, attrs ...any) {
	if !c.hedgedAway() {
		b.refuse(topic, c.id, why, attrs...)
		return
	}
	b.refused.Add(1)
	b.log.Debug("reply refused: "+why, append([]any{"topic", topic, "id", c.id, "published_again", true}, attrs...)...)
}

// ListenAll subscribes to the reply topic and to every response topic
// topics gives (asked again on each try, so it may change), retrying with a
// capped backoff until the broker has proved reachable — then it returns
// nil — or ctx ends, whose error it returns. Reachable means: the reply
// topic is subscribed (without one, at least one topic is, or there are
// none). Topics that still fail then hold up nothing: they are retried in
// the background and listed by Failing. Each failed round is logged.
func (b *Bridge) ListenAll(ctx context.Context, topics func() []string) error {
	backoff := 200 * time.Millisecond
	for {
		all := topics()
		rt := b.ReplyTopic()
		if rt != "" {
			all = append([]string{rt}, all...)
		}
		errs := b.listenMany(ctx, all, true)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if len(errs) == 0 {
			return nil
		}
		_, replyFailed := errs[rt]
		reachable := len(errs) < len(all) && (rt == "" || !replyFailed)
		joined := make([]error, 0, len(errs))
		for _, t := range slices.Sorted(maps.Keys(errs)) {
			joined = append(joined, errs[t])
		}
		if reachable {
			b.log.Warn("some response topics cannot be subscribed; serving the others and retrying these in the background",
				"failing", len(errs), "of", len(all), "err", errors.Join(joined...))
			b.kickTracker()
			return nil
		}
		b.log.Warn("broker not reachable yet; retrying", "err", errors.Join(joined...), "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// DroppedError ends a call whose service does not number its replies when
// the broker dropped messages for this bridge on the call's response
// topic while it ran: one of them may have been the call's, and a hole in
// an unnumbered stream would not show.
type DroppedError struct {
	Topic   string
	Dropped int64 // messages dropped on the topic for this bridge meanwhile
}

func (e *DroppedError) Error() string {
	return fmt.Sprintf("the broker dropped %d reply message(s) on %s for this gateway while the call ran, and its service does not number its replies: the reply may have a hole", e.Dropped, e.Topic)
}

// Unwrap makes errors.Is(err, ErrLostReplies) true.
func (e *DroppedError) Unwrap() error { return ErrLostReplies }

// DeliveryCounter is what the watch asks, when Options.Watch has it, about
// a non-persistent response topic of services that do not number their
// replies: how many messages the topic took in, and how many the broker
// sent to a subscription, in which lifetime of that subscription
// (pulsarbroker.AdminPresence.Delivery).
type DeliveryCounter interface {
	Delivery(ctx context.Context, topic, subscription string) (transport.Delivery, error)
}

// LostRepliesError ends a call whose reply has a hole in it: a later reply
// message arrived, numbered past the ones missing. The broker drops
// messages on non-persistent topics when a consumer falls behind; a reply
// with a hole is never passed on as if it were whole.
type LostRepliesError struct {
	Lost int // reply messages missing
}

func (e *LostRepliesError) Error() string {
	return fmt.Sprintf("%d reply message(s) of this call were lost in transit (dropped by the broker)", e.Lost)
}

// Unwrap makes errors.Is(err, ErrLostReplies) true.
func (e *LostRepliesError) Unwrap() error { return ErrLostReplies }

// Close stops listening. Calls still waiting end with ErrClosed.
func (b *Bridge) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	ls := b.topics
	b.topics = nil
	close(b.closing)
	b.mu.Unlock()
	b.sweeps.Wait()
	b.stopTracker()
	b.stopWatch()
	// The calls first: closing the subscriptions takes a broker round
	// trip each, and a reply arriving meanwhile finds its call ended.
	b.pending.each(func(c *Call) { c.finish(ErrClosed) })
	for _, l := range ls {
		<-l.ready
		if l.sub != nil {
			_ = l.sub.Close()
		}
	}
}

// newID returns a random 128-bit correlation id in hex.
func newID() string { return randid.New() }
