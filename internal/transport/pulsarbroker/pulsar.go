// Package pulsarbroker is the Apache Pulsar implementation of
// transport.Broker: producers per topic with adaptive batching, consumers
// that resubscribe, table readers (Follow, ReadSince, ReadRange),
// NewClient, through which every Pulsar client of a program is made, and
// AdminPresence, which asks Pulsar's admin API for a topic's consumers
// and deliveries. It is the one package of the gateway's data path that
// links the Pulsar client library; the bridge, the core and the doors see
// only transport.
package pulsarbroker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/backoff"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/toolgate/toolgate/internal/ratelog"
	"github.com/toolgate/toolgate/internal/transport"
)

// Options configures the Pulsar broker client.
type Options struct {
	// URL of the broker, e.g. pulsar://127.0.0.1:6650.
	URL string
	// Client, when set, is used instead of creating one from URL and the
	// connection settings below; Close leaves it open for its owner.
	Client pulsar.Client
	// ConnectionTimeout bounds dialling the broker (default 5 s).
	ConnectionTimeout time.Duration
	// OperationTimeout bounds producer and consumer creation (default 10 s).
	OperationTimeout time.Duration
	// MaxPendingPerProducer bounds the messages a producer holds while
	// waiting for the broker's receipt (default 10000). Beyond it Publish
	// fails with transport.ErrQueueFull instead of blocking.
	MaxPendingPerProducer int
	// ReceiverQueueSize is each consumer's prefetch queue (default 1000).
	ReceiverQueueSize int
	// Authentication, when set, is passed to the client (token, TLS, OAuth2).
	Authentication pulsar.Authentication
	// TLSTrustCertsFilePath and TLSAllowInsecureConnection configure TLS
	// for pulsar+ssl:// URLs.
	TLSTrustCertsFilePath      string
	TLSAllowInsecureConnection bool
	// ProducerIdleTimeout closes a topic's producer after this long
	// without a message (default 5 min); the next message opens it again.
	ProducerIdleTimeout time.Duration
	// MaxReconnectBackoff caps the wait between reconnection attempts of
	// producers and consumers after the broker went away (default 2 s; the
	// client library's own cap is 60 s, too slow for request/reply).
	MaxReconnectBackoff time.Duration
	// Logger receives the client's own log lines (default: discarded below
	// warnings).
	Logger *slog.Logger
	// LogEvery is how often each kind of the client's warnings, and of the
	// reconnect warnings of the producers and consumers made here, is
	// written (default DefaultLogEvery): the first at once, then one line
	// an interval with the count of those left out. While the broker is
	// away they would otherwise repeat several times a second for every
	// topic.
	LogEvery time.Duration
	// DisableBatching sends every message in a frame of its own. By
	// default a producer batches adaptively: a message that finds the
	// producer idle is sent at once, and messages published while a batch
	// waits for the broker's receipt go out together in the next one. At
	// low load that is the same as no batching; under load the broker
	// handles one entry per batch instead of one per message.
	DisableBatching bool
}

// DefaultLogEvery is Options.LogEvery's default.
const DefaultLogEvery = 30 * time.Second

// maxBatch bounds the messages in one adaptive batch (Pulsar's own default
// batch limit is 1000 messages or 128 KiB, whichever comes first).
const maxBatch = 500

// Pulsar is a Broker backed by an Apache Pulsar client. Producers are created
// on first use per topic and reused.
type Pulsar struct {
	client pulsar.Client
	shared bool // client is the caller's: Close leaves it open
	opts   Options
	log    *slog.Logger
	// slow is log, rate-limited (Options.LogEvery): for the warnings that
	// repeat while the broker is away.
	slow *slog.Logger

	// reach's context ends while the broker is known to be away
	// (SetReachable): then nobody waits for a receipt.
	reach atomic.Pointer[reachSignal]

	mu        sync.Mutex
	producers map[string]*producerEntry
	// closing holds the producers whose close has begun and not
	// returned; opened the subscriptions and readers not closed yet.
	// What is in either when a bounded close runs out of time is what it
	// left (Left).
	closing   map[*producerEntry]struct{}
	opened    map[*opened]struct{}
	closed    bool
	stop      chan struct{} // ends the idle-producer janitor
	janitor   sync.WaitGroup
	closeOnce sync.Once
	closeDone chan struct{} // closed once everything, the client too, has closed
}

// opened is a subscription or a reader of the client, to close.
type opened struct {
	name  string // "<subscription> on <topic>"
	close func()
}

type producerEntry struct {
	topic string
	ready chan struct{} // closed once p or err is set
	p     pulsar.Producer
	err   error
	// used is set by each publish and cleared by the idle janitor, which
	// notes when it last found it set (seen, Unix nanoseconds, under
	// Pulsar.mu): cheaper than a clock read per publish.
	used atomic.Bool
	seen int64

	// Adaptive batching (nil queue: batching disabled): publishers queue
	// here and one sender goroutine per producer hands the queue to the
	// client in batches.
	queue   chan *outgoing
	mu      sync.RWMutex // held for reading while queueing, for writing to stop
	stopped bool
	sent    chan struct{} // closed when the sender has returned
	// handing is held by whoever hands messages to the client and waits
	// for the broker's receipt of them: the sender goroutine with a
	// batch, or a publisher sending its own message inline (PublishInline)
	// because the sender was idle and nothing was queued. One batch is in
	// flight at a time either way; the next gathers in the queue.
	handing sync.Mutex
	timeout time.Duration // bounds the wait for a receipt
	// wait is what the holder of handing waits for a receipt under
	// (flushWait); nil until the first hand, and after one that ended.
	wait *flushWait
	// reach is the client's (Pulsar.reach): a wait for a receipt ends
	// with its context.
	reach *atomic.Pointer[reachSignal]
}

// reachSignal's context ends when the broker is found away.
type reachSignal struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newReachSignal() *reachSignal {
	ctx, cancel := context.WithCancel(context.Background())
	return &reachSignal{ctx, cancel}
}

// SetReachable says whether the broker takes messages, as the caller
// found out (a probe). While it does not, publishes are still handed to
// the client, which sends them once it has connected again, but nobody
// waits for their receipts: an inline publisher, and the sender of a
// topic's batches, return as soon as the message is handed over, and the
// waits under way end. Each message's outcome still reaches its caller.
func (b *Pulsar) SetReachable(ok bool) {
	cur := b.reach.Load()
	switch {
	case !ok:
		cur.cancel()
	case cur.ctx.Err() != nil:
		b.reach.CompareAndSwap(cur, newReachSignal())
	}
}

// outgoing is one queued message and what to tell of its outcome.
type outgoing struct {
	ctx      context.Context
	deadline time.Time // transport.Message.Deadline
	topic    string
	msg      pulsar.ProducerMessage
	done     func(error) // called once, from the sender or the client's callback
}

// report tells of m's outcome, in the transport's terms.
func (m *outgoing) report(err error) { m.done(classify(m.topic, err)) }

// sent is the client's callback of m. The broker acknowledges a message
// it dropped (a non-persistent one arriving on a connection with more
// than maxConcurrentNonPersistentMessagePerConnection sends in hand) with
// message id -1:-1, where a message it took on such a topic has 0:0:
// that one is reported as transport.ErrDropped.
func (m *outgoing) sent(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
	if err == nil && id != nil && id.LedgerID() == -1 && id.EntryID() == -1 {
		err = transport.ErrDropped
	}
	m.report(err)
}

// ConnectionOptions are Options that connect as c says; the caller adds
// what its use needs (queue sizes, batching, a logger).
func ConnectionOptions(c transport.Connection) Options {
	o := Options{URL: c.URL, TLSTrustCertsFilePath: c.TLSTrustCertsFile}
	if c.TokenFile != "" {
		o.Authentication = pulsar.NewAuthenticationTokenFromFile(c.TokenFile)
	}
	return o
}

// New creates the broker client. It does not dial yet: the first Publish or
// Subscribe does.
func New(opts Options) (*Pulsar, error) {
	opts = opts.withDefaults()
	c := opts.Client
	if c == nil {
		var err error
		if c, err = NewClient(opts); err != nil {
			return nil, err
		}
	}
	b := &Pulsar{client: c, shared: opts.Client != nil, opts: opts, log: opts.Logger, slow: ratelog.New(opts.Logger, opts.LogEvery),
		producers: map[string]*producerEntry{}, closing: map[*producerEntry]struct{}{}, opened: map[*opened]struct{}{},
		stop: make(chan struct{}), closeDone: make(chan struct{})}
	b.reach.Store(newReachSignal())
	b.janitor.Add(1)
	go b.closeIdleProducers()
	return b, nil
}

// NewClient creates a Pulsar client from opts' URL and connection
// settings (URL, timeouts, authentication, TLS, logger), for a program
// that uses the client itself, such as the registry's readers. Every
// client of the gateway is made here, so they all connect alike.
func NewClient(opts Options) (pulsar.Client, error) {
	opts = opts.withDefaults()
	if opts.URL == "" {
		return nil, errors.New("pulsar: empty broker URL")
	}
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:                        opts.URL,
		ConnectionTimeout:          opts.ConnectionTimeout,
		OperationTimeout:           opts.OperationTimeout,
		Authentication:             opts.Authentication,
		TLSTrustCertsFilePath:      opts.TLSTrustCertsFilePath,
		TLSAllowInsecureConnection: opts.TLSAllowInsecureConnection,
		// Its warnings repeat for every producer and consumer, several
		// times a second, while the broker is away: rate-limited.
		Logger: plog.NewLoggerWithSlog(slog.New(quieter{ratelog.NewHandler(opts.Logger.Handler(), opts.LogEvery)}).With("component", "pulsar-client")),
	})
	if err != nil {
		return nil, fmt.Errorf("pulsar: %w: %w", transport.ErrUnavailable, err)
	}
	return c, nil
}

// withDefaults fills in what opts leaves zero.
func (opts Options) withDefaults() Options {
	if opts.ConnectionTimeout <= 0 {
		opts.ConnectionTimeout = 5 * time.Second
	}
	if opts.OperationTimeout <= 0 {
		opts.OperationTimeout = 10 * time.Second
	}
	if opts.MaxPendingPerProducer <= 0 {
		opts.MaxPendingPerProducer = 10000
	}
	if opts.ReceiverQueueSize <= 0 {
		opts.ReceiverQueueSize = 1000
	}
	if opts.ProducerIdleTimeout <= 0 {
		opts.ProducerIdleTimeout = 5 * time.Minute
	}
	if opts.MaxReconnectBackoff <= 0 {
		opts.MaxReconnectBackoff = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.LogEvery <= 0 {
		opts.LogEvery = DefaultLogEvery
	}
	return opts
}

// closeIdleProducers closes producers unused for ProducerIdleTimeout.
func (b *Pulsar) closeIdleProducers() {
	defer b.janitor.Done()
	t := time.NewTicker(max(b.opts.ProducerIdleTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		cutoff := now.Add(-b.opts.ProducerIdleTimeout).UnixNano()
		var idle []*producerEntry
		b.mu.Lock()
		for topic, e := range b.producers {
			select {
			case <-e.ready:
			default:
				continue // still being created
			}
			if e.used.Swap(false) {
				e.seen = now.UnixNano()
				continue
			}
			if e.p != nil && e.seen < cutoff {
				delete(b.producers, topic)
				b.closing[e] = struct{}{}
				idle = append(idle, e)
			}
		}
		b.mu.Unlock()
		for _, e := range idle {
			b.log.Debug("closing idle producer", "topic", e.topic)
			b.closeProducer(e)
		}
	}
}

// quieter passes on the client library's warnings and errors only: its
// informational lines (one per producer and consumer opened or closed)
// would drown the gateway's own.
type quieter struct{ slog.Handler }

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && q.Handler.Enabled(ctx, l)
}

func (q quieter) WithAttrs(as []slog.Attr) slog.Handler { return quieter{q.Handler.WithAttrs(as)} }

func (q quieter) WithGroup(name string) slog.Handler { return quieter{q.Handler.WithGroup(name)} }

func (b *Pulsar) entry(ctx context.Context, topic string, deadline time.Time) (*producerEntry, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, transport.ErrClosed
	}
	e := b.producers[topic]
	if e == nil {
		e = &producerEntry{topic: topic, ready: make(chan struct{}), reach: &b.reach, seen: time.Now().UnixNano()}
		b.producers[topic] = e
		b.mu.Unlock()
		e.p, e.err = b.client.CreateProducer(pulsar.ProducerOptions{
			Topic:           topic,
			DisableBatching: b.opts.DisableBatching,
			// Batches are flushed by the sender (adaptive batching), not
			// by the client's timer: the delay only matters if a flush
			// were missed.
			BatchingMaxPublishDelay: 100 * time.Millisecond,
			BatchingMaxMessages:     maxBatch,
			MaxPendingMessages:      b.opts.MaxPendingPerProducer,
			DisableBlockIfQueueFull: true,
			SendTimeout:             b.opts.OperationTimeout,
			BackOffPolicyFunc:       b.backoff,
		})
		if e.err != nil {
			e.err = fmt.Errorf("%w: create producer for %s: %w", transport.ErrUnavailable, topic, e.err)
			b.mu.Lock()
			delete(b.producers, topic) // let the next call try again
			b.mu.Unlock()
		} else if !b.opts.DisableBatching {
			e.queue = make(chan *outgoing, b.opts.MaxPendingPerProducer)
			e.sent = make(chan struct{})
			e.timeout = b.opts.OperationTimeout
			go e.send()
		}
		close(e.ready)
	} else {
		b.mu.Unlock()
	}
	select {
	case <-e.ready:
	default:
		// Still being created: wait, until the deadline at most.
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if e.err != nil {
		return nil, e.err
	}
	if !e.used.Load() {
		e.used.Store(true)
	}
	return e, nil
}

// enqueue hands m to the sender. It fails at once when the queue is full
// (overload) or the producer is closing (the caller opens a new one).
// With inline, when nothing is queued and nobody is handing a batch to the
// client, m is handed over on the calling goroutine, which waits for the
// broker's receipt: one goroutine hand-off fewer than through the sender.
func (e *producerEntry) enqueue(m *outgoing, inline bool) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.stopped {
		return pulsar.ErrProducerClosed
	}
	if inline && len(e.queue) == 0 && e.handing.TryLock() {
		// The wait ends with the caller's context too: the message stays
		// with the client, and the next flush takes it.
		e.hand(m.ctx, m.deadline, m)
		e.handing.Unlock()
		return nil
	}
	select {
	case e.queue <- m:
		return nil
	default:
		return pulsar.ErrSendQueueIsFull
	}
}

// send is the adaptive batcher: it takes whatever is queued (at least one
// message, at most maxBatch), gives it to the client as one batch, and
// waits for the broker's receipt of it before taking the next. While it
// waits, new messages gather in the queue.
func (e *producerEntry) send() {
	defer close(e.sent)
	batch := make([]*outgoing, 0, maxBatch)
	for {
		m, ok := <-e.queue
		if !ok {
			return
		}
		e.handing.Lock() // after an inline publisher's receipt, if one is waiting
		batch = append(batch[:0], m)
	fill:
		for len(batch) < maxBatch {
			select {
			case m, ok := <-e.queue:
				if !ok {
					break fill
				}
				batch = append(batch, m)
			default:
				break fill
			}
		}
		e.hand(context.Background(), time.Time{}, batch...)
		e.handing.Unlock()
	}
}

// hand gives batch to the client as one batch and waits for the broker's
// receipt of it, at most e.timeout, while ctx lasts and until deadline
// (zero: none). The caller holds e.handing.
func (e *producerEntry) hand(ctx context.Context, deadline time.Time, batch ...*outgoing) {
	queued := 0
	for _, m := range batch {
		if err := m.expired(); err != nil {
			m.report(err) // its caller is gone already
			continue
		}
		e.p.SendAsync(m.ctx, &m.msg, m.sent)
		queued++
	}
	if queued == 0 {
		return
	}
	if limit := time.Now().Add(e.timeout); deadline.IsZero() || limit.Before(deadline) {
		deadline = limit
	}
	// Each message's outcome reaches its caller through its own callback;
	// the flush only paces the batches. While the broker is known to be
	// away, nobody waits for it.
	w := e.flushWait()
	w.timer.Reset(time.Until(deadline))
	var stopCaller func() bool
	if ctx.Done() != nil {
		stopCaller = context.AfterFunc(ctx, w.cancel) // an inline publisher's
	}
	_ = e.p.FlushWithCtx(w.ctx)
	if stopCaller != nil {
		stopCaller()
	}
	if !w.timer.Stop() || w.ctx.Err() != nil {
		// Ended by its bound, the broker's absence or the caller: the
		// next batch waits under a new one.
		w.cancel()
		e.wait = nil
	}
}

// flushWait is one context for the waits for the broker's receipts of
// many batches, ended by a timer of its own, reset for each batch, when a
// wait passes its bound, and with the client's reach (SetReachable): a
// context and a timer made for each batch cost about a microsecond.
type flushWait struct {
	ctx    context.Context
	cancel context.CancelFunc
	timer  *time.Timer // cancels ctx when it fires
	reach  *reachSignal
}

// flushWait returns the wait the holder of e.handing waits for a receipt
// under: the last one while it lasts and the reach it was made under is
// the client's, else a new one.
func (e *producerEntry) flushWait() *flushWait {
	reach := e.reach.Load()
	if w := e.wait; w != nil && w.reach == reach && w.ctx.Err() == nil {
		return w
	}
	ctx, cancel := context.WithCancel(reach.ctx)
	w := &flushWait{ctx: ctx, cancel: cancel, reach: reach, timer: time.AfterFunc(time.Hour, cancel)}
	w.timer.Stop()
	if e.wait != nil {
		e.wait.cancel()
	}
	e.wait = w
	return w
}

// close stops taking messages, lets the sender hand over what was queued
// already, and closes the producer.
func (e *producerEntry) close() {
	if e.queue != nil {
		e.mu.Lock()
		e.stopped = true
		close(e.queue)
		e.mu.Unlock()
		<-e.sent
	}
	e.handing.Lock() // after an inline publisher's wait
	if e.wait != nil {
		e.wait.timer.Stop()
		e.wait.cancel()
		e.wait = nil
	}
	e.handing.Unlock()
	e.p.Close()
}

// Producers counts the open producers.
func (b *Pulsar) Producers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.producers)
}

// Publish implements Broker.
func (b *Pulsar) Publish(ctx context.Context, topic string, msg transport.Message) error {
	done := make(chan error, 1)
	if err := b.PublishAsync(ctx, topic, msg, func(err error) { done <- err }); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PublishAsync implements Broker: done is called from the client's
// goroutines.
func (b *Pulsar) PublishAsync(ctx context.Context, topic string, msg transport.Message, done func(error)) error {
	return b.publishRetry(ctx, topic, msg, done, false)
}

// PublishInline implements InlinePublisher: when the topic's producer has
// nothing queued and no batch awaiting its receipt, the message is sent
// on the calling goroutine, which waits for the broker's receipt (so done
// has normally been called when it returns; the wait ends with ctx);
// otherwise it is queued as by PublishAsync.
func (b *Pulsar) PublishInline(ctx context.Context, topic string, msg transport.Message, done func(error)) error {
	return b.publishRetry(ctx, topic, msg, done, true)
}

func (b *Pulsar) publishRetry(ctx context.Context, topic string, msg transport.Message, done func(error), inline bool) error {
	err := b.publishAsync(ctx, topic, msg, done, inline)
	if errors.Is(err, pulsar.ErrProducerClosed) {
		// The idle janitor closed it between lookup and send: once more
		// with a fresh producer.
		err = b.publishAsync(ctx, topic, msg, done, inline)
	}
	return classify(topic, err)
}

func (b *Pulsar) publishAsync(ctx context.Context, topic string, msg transport.Message, done func(error), inline bool) error {
	e, err := b.entry(ctx, topic, msg.Deadline)
	if err != nil {
		return err
	}
	// One allocation holds the message and its outcome's way back.
	m := &outgoing{ctx: ctx, deadline: msg.Deadline, topic: topic, done: done,
		msg: pulsar.ProducerMessage{Payload: msg.Payload, Properties: msg.Properties, Key: msg.Key}}
	if e.queue == nil {
		if !msg.Deadline.IsZero() {
			var cancel context.CancelFunc
			m.ctx, cancel = context.WithDeadline(ctx, msg.Deadline)
			m.done = func(err error) { cancel(); done(err) }
		}
		e.p.SendAsync(m.ctx, &m.msg, m.sent)
		return nil
	}
	return e.enqueue(m, inline)
}

// expired is the error of a message whose deadline has passed, if it has.
func (m *outgoing) expired() error {
	if err := m.ctx.Err(); err != nil {
		return err
	}
	if !m.deadline.IsZero() && !time.Now().Before(m.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func classify(topic string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pulsar.ErrSendQueueIsFull), errors.Is(err, pulsar.ErrMemoryBufferIsFull):
		return fmt.Errorf("%w: %s: %w", transport.ErrQueueFull, topic, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return fmt.Errorf("%w: publish to %s: %w", transport.ErrUnavailable, topic, err)
	}
}

// Subscribe implements Broker. Messages on non-persistent topics are never
// acknowledged: acknowledgements do nothing there, and pulsar-client-go's
// grouped acks drop messages on such topics (all their ids are equal).
func (b *Pulsar) Subscribe(ctx context.Context, topic, subscription string, typ transport.SubscriptionType, h transport.Handler) (transport.Subscription, error) {
	return b.subscribe(ctx, topic, subscription, typ, func(m transport.Message) bool { h(m); return true })
}

// Consume is Subscribe for a persistent topic whose messages must not be
// lost: h acknowledges a message by returning true, once it has done what
// the message asks; false (or a crash before it returns) has the broker
// deliver it again, after NackDelay, to this or another consumer of the
// subscription. transport.Message.Redeliveries counts the earlier deliveries.
func (b *Pulsar) Consume(ctx context.Context, topic, subscription string, typ transport.SubscriptionType, h func(transport.Message) bool) (transport.Subscription, error) {
	return b.ConsumeAsync(ctx, topic, subscription, typ, func(m transport.Message, done func(bool)) { done(h(m)) })
}

// ConsumeAsync is Consume for a handler that may finish with a message
// later, on another goroutine: it calls done once, with what Consume's
// handler would return, and the next message is handed over meanwhile.
func (b *Pulsar) ConsumeAsync(ctx context.Context, topic, subscription string, typ transport.SubscriptionType, h func(m transport.Message, done func(ack bool))) (transport.Subscription, error) {
	if strings.HasPrefix(topic, "non-persistent://") {
		return nil, fmt.Errorf("consume %s: not a persistent topic", topic)
	}
	return b.subscribeWith(ctx, topic, subscription, typ, h)
}

// NackDelay is how long a message Consume's handler refused waits before
// the broker delivers it again.
const NackDelay = time.Second

func (b *Pulsar) subscribe(ctx context.Context, topic, subscription string, typ transport.SubscriptionType, h func(transport.Message) bool) (transport.Subscription, error) {
	return b.subscribeWith(ctx, topic, subscription, typ, func(m transport.Message, done func(bool)) { done(h(m)) })
}

func (b *Pulsar) subscribeWith(ctx context.Context, topic, subscription string, typ transport.SubscriptionType, h func(transport.Message, func(bool))) (transport.Subscription, error) {
	st := pulsar.Exclusive
	switch typ {
	case transport.Shared:
		st = pulsar.Shared
	case transport.KeyShared:
		st = pulsar.KeyShared
	}
	persistent := !strings.HasPrefix(topic, "non-persistent://")
	mode := pulsar.Durable
	if typ == transport.Transient && persistent {
		mode = pulsar.NonDurable
	}
	opts := pulsar.ConsumerOptions{
		Topic:                       topic,
		SubscriptionName:            subscription,
		Type:                        st,
		ReceiverQueueSize:           b.opts.ReceiverQueueSize,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest,
		SubscriptionMode:            mode,
		// One ack per message: the grouping tracker is what loses messages
		// whose ids repeat.
		AckGroupingOptions:  &pulsar.AckGroupingOptions{MaxSize: 1},
		BackOffPolicyFunc:   b.backoff,
		NackRedeliveryDelay: NackDelay,
	}
	if !persistent {
		// Part of what the client has received waits in a channel of ours,
		// not in its dispatcher, whose queue is dropped when the consumer
		// closes: Close hands what is in the channel to the handler
		// (drain). The client grants the broker a permit for each message
		// moved to the channel, so the consumer may hold up to the
		// channel's room more than its receiver queue.
		opts.MessageChannel = make(chan pulsar.ConsumerMessage, min(b.opts.ReceiverQueueSize, drainChannel))
	}
	type result struct {
		c   pulsar.Consumer
		err error
	}
	res := make(chan result, 1)
	go func() {
		// ServiceNotReady is the broker asking for a retry with a fresh
		// lookup (the topic's bundle is being assigned or moved, as on a
		// cluster just started or during an unload), MetadataError a
		// cluster's broker whose metadata is not there yet: retried with the
		// reconnect backoff while ctx lasts, not returned as a refusal.
		bo := b.backoff()
		for {
			c, err := b.client.Subscribe(opts)
			if err == nil || !subscribeRetryable(err) || ctx.Err() != nil {
				res <- result{c, err}
				return
			}
			d := bo.Next()
			b.slow.Warn("the broker is not ready for the topic; subscribing again", "topic", topic, "subscription", subscription, "err", err, "retry_in", d)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				res <- result{nil, err}
				return
			case <-t.C:
			}
		}
	}()
	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		go func() { // do not leak a consumer created after we gave up
			if r := <-res; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: subscribe %s to %s: %w", transport.ErrUnavailable, subscription, topic, r.err)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	s := &pulsarSub{c: r.c, cancel: cancel, done: make(chan struct{}), drain: !persistent}
	s.open = &opened{name: subscription + " on " + topic, close: func() { _ = s.Close() }}
	if !b.remember(s.open) {
		// Closed meanwhile: the client closes the consumer; nothing reads it.
		cancel()
		go r.c.Close()
		return nil, transport.ErrClosed
	}
	s.forget = func() { b.forget(s.open) }
	deliver := func(m pulsar.Message, c pulsar.Consumer) {
		msg := transport.Message{Payload: m.Payload(), Properties: m.Properties()}
		if persistent {
			msg.Key, msg.Redeliveries, msg.PublishTime = m.Key(), m.RedeliveryCount(), m.PublishTime()
		}
		if !persistent {
			h(msg, func(bool) {})
			return
		}
		h(msg, func(ok bool) {
			if ok {
				_ = c.Ack(m)
			} else {
				c.Nack(m)
			}
		})
	}
	go func() {
		defer close(s.done)
		c := r.c
		for {
			m, err := c.Receive(loopCtx)
			if err != nil {
				if loopCtx.Err() != nil {
					return
				}
				if s.closing.Load() {
					// Closed by Close (non-persistent topics): what the
					// broker sent before the close is handled, not lost.
					for {
						select {
						case cm := <-c.Chan():
							deliver(cm.Message, c)
						default:
							return
						}
					}
				}
				if isConsumerClosed(err) {
					// The client gave the consumer up (a non-retriable
					// error on reconnect: TopicNotFound, ConsumerBusy, …):
					// subscribe again, as a new consumer.
					b.slow.Warn("consumer closed by the client; subscribing again", "topic", topic, "subscription", subscription)
					if c = b.resubscribe(loopCtx, opts); c == nil {
						return
					}
					s.setConsumer(c)
					continue
				}
				b.slow.Warn("receive failed", "topic", topic, "subscription", subscription, "err", err)
				t := time.NewTimer(100 * time.Millisecond)
				select {
				case <-loopCtx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				continue
			}
			deliver(m, c) // the consumer that received it acknowledges it
		}
	}()
	return s, nil
}

func isConsumerClosed(err error) bool {
	var pe *pulsar.Error
	return errors.As(err, &pe) && pe.Result() == pulsar.ConsumerClosed
}

// subscribeRetryable reports whether err is the broker's ServiceNotReady,
// which asks the client to look the topic up again and retry, or its
// MetadataError, which a broker of a cluster just started answers while
// its metadata store catches up: both pass with a retry.
func subscribeRetryable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "ServiceNotReady") || strings.Contains(s, "MetadataError")
}

// resubscribe creates the consumer again, with the reconnect backoff,
// until it succeeds (it returns the consumer) or ctx ends (nil).
func (b *Pulsar) resubscribe(ctx context.Context, opts pulsar.ConsumerOptions) pulsar.Consumer {
	bo := b.backoff()
	for {
		c, err := b.client.Subscribe(opts)
		if err == nil {
			if ctx.Err() != nil {
				c.Close()
				return nil
			}
			b.log.Info("subscribed again", "topic", opts.Topic, "subscription", opts.SubscriptionName)
			return c
		}
		d := bo.Next()
		b.slow.Warn("subscribing again failed; retrying", "topic", opts.Topic, "subscription", opts.SubscriptionName, "err", err, "retry_in", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// drainChannel bounds the channel a non-persistent subscription's
// messages wait in (32 bytes each): up to this many waiting in the client
// are handed over when it closes; what still waits in the client's own
// queue then is lost (on a non-persistent topic nothing sends it again).
const drainChannel = 1024

type pulsarSub struct {
	mu     sync.Mutex
	c      pulsar.Consumer // replaced when the client closed it
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	// drain: on a non-persistent topic Close closes the consumer first and
	// the loop handles what had arrived (nothing redelivers it); closing
	// tells the loop the consumer's end is Close's.
	drain   bool
	closing atomic.Bool
	// open is the subscription in its client's list of what is open;
	// forget takes it off once Close has closed it.
	open   *opened
	forget func()
}

func (s *pulsarSub) setConsumer(c pulsar.Consumer) {
	s.mu.Lock()
	s.c = c
	s.mu.Unlock()
}

// Close implements transport.Subscription. On a non-persistent topic it closes the
// consumer first, so that the broker sends it nothing more, and returns
// once the messages it had received are handled: a request on its way to
// a replica that stops is served, not dropped (nothing would send it
// again). On a persistent topic what was not acknowledged is redelivered,
// so the loop just stops.
func (s *pulsarSub) Close() error {
	s.once.Do(func() {
		defer s.forget()
		if s.drain {
			s.closing.Store(true)
			s.mu.Lock()
			c := s.c
			s.mu.Unlock()
			c.Close()
			<-s.done
			s.cancel()
			return
		}
		s.cancel()
		<-s.done
		s.mu.Lock()
		c := s.c
		s.mu.Unlock()
		c.Close()
	})
	return nil
}

func (b *Pulsar) backoff() backoff.Policy {
	return &cappedBackoff{max: b.opts.MaxReconnectBackoff}
}

// cappedBackoff doubles from 100 ms up to max, with up to 20% jitter.
type cappedBackoff struct {
	max, cur time.Duration
}

func (c *cappedBackoff) Next() time.Duration {
	c.cur = min(max(2*c.cur, 100*time.Millisecond), c.max)
	return c.cur + time.Duration(rand.Int64N(int64(c.cur)/5+1))
}

func (c *cappedBackoff) IsMaxBackoffReached() bool { return c.cur >= c.max }

func (c *cappedBackoff) Reset() { c.cur = 0 }

// Close implements Broker: it closes every producer, the subscriptions
// and readers still open, and the client, and returns once they have
// closed. While the broker is away that can take as long as the broker
// does: CloseWithin bounds it.
func (b *Pulsar) Close() { b.CloseWithin(context.Background()) }

// CloseWithin closes as Close does, but returns when ctx ends if that
// comes first, with what had not closed by then: the closes go on, and
// whatever the broker does, the caller is free to go. The producers, the
// subscriptions and the readers close at once, each on a goroutine of its
// own, then the client. Later calls wait for the same closes.
func (b *Pulsar) CloseWithin(ctx context.Context) Left {
	b.closeOnce.Do(func() { go b.closeAll() })
	select {
	case <-b.closeDone:
		return Left{}
	case <-ctx.Done():
		return b.left()
	}
}

// closeAll closes everything of b, the client last, and then closeDone.
func (b *Pulsar) closeAll() {
	defer close(b.closeDone)
	b.mu.Lock()
	b.closed = true
	ps := b.producers
	b.producers = nil
	for _, e := range ps {
		b.closing[e] = struct{}{}
	}
	open := slices.Collect(maps.Keys(b.opened))
	b.mu.Unlock()
	close(b.stop)
	var wg sync.WaitGroup
	for _, e := range ps {
		wg.Go(func() { b.closeProducer(e) })
	}
	for _, o := range open {
		wg.Go(o.close)
	}
	wg.Wait()
	b.janitor.Wait() // an idle producer it was closing
	if !b.shared {
		b.client.Close()
	}
}

// closeProducer closes e, one being created once it is, and takes it off
// the producers closing.
func (b *Pulsar) closeProducer(e *producerEntry) {
	<-e.ready
	if e.p != nil {
		e.close()
	}
	b.mu.Lock()
	delete(b.closing, e)
	b.mu.Unlock()
}

// remember adds o to what is open, unless b is closed (false).
func (b *Pulsar) remember(o *opened) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.opened[o] = struct{}{}
	return true
}

// forget takes o off what is open: it has closed.
func (b *Pulsar) forget(o *opened) {
	b.mu.Lock()
	delete(b.opened, o)
	b.mu.Unlock()
}

// Left is what a close bounded in time (CloseWithin) left behind: what
// had not closed when the time ran out. The zero Left: everything closed.
type Left struct {
	// Subscriptions holds the subscriptions and readers still open, as
	// "<subscription> on <topic>".
	Subscriptions []string
	// Producers holds the topics whose producer had not closed: messages
	// handed to one that the broker had not acknowledged may never be
	// sent.
	Producers []string
	// Queued counts the messages those producers still held in their
	// queues, not handed to the client yet.
	Queued int
	// Client: the client itself had not closed (never set for a client
	// given in Options.Client, which is its owner's to close).
	Client bool
}

// Empty reports whether everything closed.
func (l Left) Empty() bool { return len(l.Subscriptions) == 0 && len(l.Producers) == 0 && !l.Client }

// left is what has not closed yet.
func (b *Pulsar) left() Left {
	select {
	case <-b.closeDone:
		return Left{}
	default:
	}
	var l Left
	b.mu.Lock()
	// Those closeAll has not taken yet are in producers still.
	for _, e := range slices.Concat(slices.Collect(maps.Keys(b.closing)), slices.Collect(maps.Values(b.producers))) {
		l.Producers = append(l.Producers, e.topic)
		select {
		case <-e.ready:
			l.Queued += len(e.queue)
		default: // still being created: nothing queued yet
		}
	}
	for o := range b.opened {
		l.Subscriptions = append(l.Subscriptions, o.name)
	}
	b.mu.Unlock()
	slices.Sort(l.Producers)
	slices.Sort(l.Subscriptions)
	l.Client = !b.shared
	return l
}

// Follow reads topic as a table: its compacted view from the earliest
// message, then every message as it comes. apply gets each message (a
// tombstone — an empty payload or Pulsar's null value — with a nil
// Payload); caughtUp is called once the reader has reached the end of
// what was there when it started. Follow returns when ctx ends (nil) or
// the reader fails; the caller reads again from the start.
func (b *Pulsar) Follow(ctx context.Context, topic, name string, apply func(transport.Message), caughtUp func()) error {
	r, err := b.client.CreateReader(pulsar.ReaderOptions{
		Topic:             topic,
		StartMessageID:    pulsar.EarliestMessageID(),
		ReadCompacted:     true,
		Name:              name,
		ReceiverQueueSize: 64,
	})
	if err != nil {
		return fmt.Errorf("%w: read %s: %w", transport.ErrUnavailable, topic, err)
	}
	closeReader, err := b.track(r, name, topic)
	if err != nil {
		return err
	}
	defer closeReader()
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read %s: %w", topic, err)
		}
		apply(tableMessage(m))
	}
	caughtUp()
	for {
		m, err := r.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read %s: %w", topic, err)
		}
		apply(tableMessage(m))
	}
}

func tableMessage(m pulsar.Message) transport.Message {
	msg := transport.Message{Payload: m.Payload(), Properties: m.Properties(), Key: m.Key(), PublishTime: m.PublishTime()}
	if m.IsNullValue() || len(msg.Payload) == 0 {
		msg.Payload = nil
	}
	return msg
}

// ReadSince reads topic in full (not its compacted view) from the first
// message published at since or later, and then every message as it
// comes, handing each to apply until apply returns false (ReadSince then
// returns nil), ctx ends (nil) or the reader fails.
func (b *Pulsar) ReadSince(ctx context.Context, topic, name string, since time.Time, apply func(transport.Message) bool) error {
	r, closeReader, err := b.readerSince(topic, name, since)
	if err != nil {
		return err
	}
	defer closeReader()
	for {
		m, err := r.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read %s: %w", topic, err)
		}
		if !apply(tableMessage(m)) {
			return nil
		}
	}
}

// ReadRange reads topic in full (not its compacted view) from the first
// message published at since or later to the last one there when it
// started, handing each to apply.
func (b *Pulsar) ReadRange(ctx context.Context, topic, name string, since time.Time, apply func(transport.Message)) error {
	r, closeReader, err := b.readerSince(topic, name, since)
	if err != nil {
		return err
	}
	defer closeReader()
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		apply(tableMessage(m))
	}
	return ctx.Err()
}

// readerSince is a reader of topic in full, at the first message published
// at since or later, and what closes it (see track).
func (b *Pulsar) readerSince(topic, name string, since time.Time) (pulsar.Reader, func(), error) {
	r, err := b.client.CreateReader(pulsar.ReaderOptions{
		Topic:             topic,
		StartMessageID:    pulsar.EarliestMessageID(),
		Name:              name,
		ReceiverQueueSize: 256,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: read %s: %w", transport.ErrUnavailable, topic, err)
	}
	closeReader, err := b.track(r, name, topic)
	if err != nil {
		return nil, nil, err
	}
	if err := r.SeekByTime(since); err != nil {
		closeReader()
		return nil, nil, fmt.Errorf("%w: read %s from %s: %w", transport.ErrUnavailable, topic, since.UTC().Format(time.RFC3339Nano), err)
	}
	return r, closeReader, nil
}

// track lists reader r (named name, of topic) among what is open, until
// the close it returns, which closes r once however often it is called
// (by its reader and by Close). A client closed meanwhile closes r
// (transport.ErrClosed).
func (b *Pulsar) track(r pulsar.Reader, name, topic string) (func(), error) {
	var once sync.Once
	o := &opened{name: name + " on " + topic}
	o.close = func() {
		once.Do(func() {
			r.Close()
			b.forget(o)
		})
	}
	if !b.remember(o) {
		go r.Close()
		return nil, transport.ErrClosed
	}
	return o.close, nil
}
