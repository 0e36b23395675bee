package operations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/ratelog"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// Errors of the Manager.
var (
	// ErrNotFound: no operation of that id belongs to the caller (whether
	// another's exists is not told).
	ErrNotFound = errors.New("operation not found")
	// ErrTooMany: the caller has Options.MaxPerOwner operations running.
	ErrTooMany = errors.New("too many operations running")
	// ErrNotReady: the state table has not been read to its end yet.
	ErrNotReady = errors.New("the operations table is not read yet")
	// ErrNotSeen: the id is one this deployment made a moment ago
	// (Keys.madeHere) and this gateway's table has not read its record
	// yet: asked again shortly, it is found. It is an ErrNotReady.
	ErrNotSeen = fmt.Errorf("%w: the operation was started a moment ago and this gateway has not read its record yet", ErrNotReady)
	// ErrChunksLost: chunks of an operation's answer are missing from the
	// chunk topic (Stream).
	ErrChunksLost = errors.New("chunks of the operation's answer are missing")
	// ErrUnavailable: the broker could not be read (Stream).
	ErrUnavailable = errors.New("the operation's chunks cannot be read")
	// ErrTooLong: the caller's subject or the tool's name is longer than a
	// record may hold (every reader of the table would refuse it).
	ErrTooLong = errors.New("the operation cannot be recorded")
	// ErrNoKeys: New was given no Options.Keys.
	ErrNoKeys = errors.New("durable operations need a key to authenticate their records (--operations-key-file)")
)

// Defaults of Options.
const (
	DefaultStateTopic   = "persistent://tg/operations/state"
	DefaultChunkTopic   = "persistent://tg/operations/chunks"
	DefaultSubscription = "toolgate-operations"
	DefaultTTL          = 24 * time.Hour
	DefaultMaxPerOwner  = 1000
	DefaultMaxOutput    = 4 << 20
	DefaultSweepEvery   = time.Minute
	// lagWait is how long a reply waits for its operation's record to
	// reach this gateway's table before it is handed back to the broker.
	lagWait = 5 * time.Second
	// maxRedeliveries: a reply for an operation no table ever shows is
	// dropped after this many deliveries.
	maxRedeliveries = 10
	// clockSlack: a chunk reader starts this long before the operation's
	// start, as the gateways' clocks (which stamp the chunks) may differ.
	clockSlack = 10 * time.Second
	// lastChunkWait bounds how long Stream waits for the chunks an ended
	// operation's record announces.
	lastChunkWait = 30 * time.Second
	// propLast marks the last chunk of an answer on the chunk topic.
	propLast = "toolgate-last"
	// readBackWait bounds how long the writer of an operation's end waits
	// for its table to read the end back (putBy).
	readBackWait = 10 * time.Second
	// deadlineGrace: the gateway that started an operation writes its
	// deadline failure this long after the deadline, so that a reply the
	// service sent in time and the broker delivers late is recorded
	// first.
	deadlineGrace = time.Second
	// orphanGrace: every gateway writes the deadline failure of a running
	// operation whose deadline passed this long ago (its starter gone).
	orphanGrace = 10 * time.Second
	// deadlineEvery: how often a gateway looks for such operations.
	deadlineEvery = 5 * time.Second
	// withdrawWait bounds the deletion of the record of an operation
	// that could not start (withdraw).
	withdrawWait = 30 * time.Second
	// quietEvery: warnings that a lost broker repeats for each operation
	// are written at most once an interval, with the count of the others.
	quietEvery = 30 * time.Second
	// unseenFor: an id this deployment made (Keys.madeHere) that the
	// table does not hold is ErrNotSeen for this long after it was made
	// (the table may lag: a broker restart), ErrNotFound after.
	unseenFor = 2 * time.Minute
	// goneKept: how long the table remembers an id it saw deleted, so
	// that a deleted operation is not taken for one not seen yet.
	goneKept = unseenFor
	// foreignKept: a key named by messages this gateway cannot read is
	// reported (Foreign) this long after it was last seen.
	foreignKept = 10 * time.Minute
	// refusedWarnEvery: messages refused on the operations topics are
	// logged at warning level at most this often (each at debug level),
	// so that a flood of them cannot fill the log.
	refusedWarnEvery = time.Minute
)

// Bus is what the Manager needs of the broker (pulsarbroker.Pulsar).
type Bus interface {
	Publish(ctx context.Context, topic string, msg transport.Message) error
	ConsumeAsync(ctx context.Context, topic, subscription string, typ transport.SubscriptionType, h func(m transport.Message, done func(ack bool))) (transport.Subscription, error)
	Follow(ctx context.Context, topic, name string, apply func(transport.Message), caughtUp func()) error
	ReadSince(ctx context.Context, topic, name string, since time.Time, apply func(transport.Message) bool) error
	ReadRange(ctx context.Context, topic, name string, since time.Time, apply func(transport.Message)) error
}

// Caller publishes a request (the bridge).
type Caller interface {
	Call(ctx context.Context, t bridge.Target, req wire.Request, o bridge.CallOptions) (*bridge.Call, error)
}

// Options tune a Manager.
type Options struct {
	// Instance names this gateway in the records it writes.
	Instance string
	// StateTopic is the state table (DefaultStateTopic); ReplyTopic
	// names the topics requests of operations name in reply-to
	// (wire.OperationsTopic): each key of Keys has its own, ReplyTopic
	// followed by "." and the key's id (ReplyTopicOf), and a gateway
	// consumes those of the keys it holds, so that it never takes a reply
	// to an operation whose record it cannot read; Subscription the one
	// subscription of every gateway to them (DefaultSubscription);
	// ChunkTopic the topic the chunks
	// of answers that come in several messages are kept on, keyed by
	// operation id (DefaultChunkTopic), for Stream.
	StateTopic, ReplyTopic, Subscription, ChunkTopic string
	// TTL is how long an operation is kept after it ended (DefaultTTL).
	TTL time.Duration
	// MaxPerOwner bounds one caller's running operations
	// (DefaultMaxPerOwner).
	MaxPerOwner int
	// MaxOutput bounds an operation's output in bytes (DefaultMaxOutput).
	MaxOutput int
	// SweepEvery is how often expired operations are deleted
	// (DefaultSweepEvery).
	SweepEvery time.Duration
	// Keys encrypt and sign what this gateway writes on the state and
	// chunk topics and check and decrypt what it reads there: a message
	// none of them signed is refused. Required.
	Keys *Keys
	// TopicAllowed checks a request topic a record names (Record.Topic),
	// to which a cancel may be sent: the allow-list of announced request
	// topics (registry.Merger.CheckRequestTopic). A record naming a topic
	// it refuses is refused; an operation whose tool's topic it refuses
	// is recorded without one (its service is then not told of a
	// cancel). Nil allows every topic.
	TopicAllowed func(topic string) error
	Logger       *slog.Logger
}

// Manager starts operations and answers for them.
type Manager struct {
	bus   Bus
	calls Caller
	opts  Options
	log   *slog.Logger
	// quiet is log, rate-limited (quietEvery).
	quiet *slog.Logger

	mu        sync.RWMutex
	table     map[string]Record
	runningBy map[string]int // records of table stored as running, by owner
	changed   chan struct{}  // closed and replaced on every change
	caughtUp  atomic.Bool
	consumed  atomic.Bool
	ready     chan struct{} // closed once Ready first holds (readyOnce)
	readyOnce sync.Once
	lag       atomic.Int64 // of the last record read live: now − its publish time, ns
	// reach ends while the broker is found away (BrokerDown, reach.go).
	reach atomic.Pointer[reach]

	// gone: ids whose tombstone this table applied, and when (goneKept).
	gone map[string]time.Time

	// consumedN counts the reply topics attached (one per key).
	consumedN atomic.Int64

	fmu     sync.Mutex
	foreign map[string]time.Time // ids of keys not held, named by messages read, and when last

	lmu   sync.Mutex
	local map[string]*bridge.Call // operations this gateway started, still waited for

	// writing counts the records and chunks being written: published,
	// the broker's receipt not come yet (Unsent).
	writing atomic.Int64

	// stopped is closed once Run's context has ended: the table is no
	// longer read, so nothing waits for it to read a record back.
	stopped  chan struct{}
	stopOnce sync.Once

	// repairs counts the records written again over an older one read
	// after them (apply).
	repairs atomic.Int64

	started, told                    atomic.Int64
	done, failed, cancelled, expired atomic.Int64 // final states recorded (expired: counted by await)

	refused     [len(refusedReasons)]atomic.Int64 // messages refused, by reason (refusedReasons)
	refusedWarn atomic.Int64                      // when a refusal was last logged as a warning, unix ns
}

// New returns a Manager; Run makes it work. Options.Keys is required
// (ErrNoKeys).
func New(bus Bus, calls Caller, opts Options) (*Manager, error) {
	if opts.Keys == nil {
		return nil, ErrNoKeys
	}
	if opts.StateTopic == "" {
		opts.StateTopic = DefaultStateTopic
	}
	if opts.ReplyTopic == "" {
		opts.ReplyTopic = wire.OperationsTopic
	}
	if opts.Subscription == "" {
		opts.Subscription = DefaultSubscription
	}
	if opts.ChunkTopic == "" {
		opts.ChunkTopic = DefaultChunkTopic
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.MaxPerOwner <= 0 {
		opts.MaxPerOwner = DefaultMaxPerOwner
	}
	if opts.MaxOutput <= 0 {
		opts.MaxOutput = DefaultMaxOutput
	}
	if opts.SweepEvery <= 0 {
		opts.SweepEvery = DefaultSweepEvery
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{bus: bus, calls: calls, opts: opts, log: opts.Logger, quiet: ratelog.New(opts.Logger, quietEvery),
		table: map[string]Record{}, runningBy: map[string]int{}, changed: make(chan struct{}), gone: map[string]time.Time{},
		foreign: map[string]time.Time{}, stopped: make(chan struct{}),
		ready: make(chan struct{}), local: map[string]*bridge.Call{}}
	m.reach.Store(newReach())
	return m, nil
}

// Ready reports whether the table has been read to its end and the reply
// subscription is attached.
func (m *Manager) Ready() bool { return m.caughtUp.Load() && m.consumed.Load() }

// ReplyTopicOf is the reply topic of the operations started with the key
// named keyID (Keys.ID) when the deployment's reply topic is base.
func ReplyTopicOf(base, keyID string) string { return base + "." + keyID }

// ReplyTopics are the reply topics this gateway consumes, one per key it
// holds; requests of the operations it starts name the first.
func (m *Manager) ReplyTopics() []string {
	ids := m.opts.Keys.IDs()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = ReplyTopicOf(m.opts.ReplyTopic, id)
	}
	return out
}

// KeyIDs names the keys this gateway holds (Keys.IDs), the one it writes
// with first.
func (m *Manager) KeyIDs() []string { return m.opts.Keys.IDs() }

// Foreign names the keys, none of them held here, that messages read on
// the operations topics in the last ten minutes were written with:
// another deployment writing on the same topics, or a replica given other
// keys (a rotation under way). Sorted.
func (m *Manager) Foreign() []string {
	now := time.Now()
	m.fmu.Lock()
	defer m.fmu.Unlock()
	var out []string
	for id, at := range m.foreign {
		if now.Sub(at) > foreignKept {
			delete(m.foreign, id)
			continue
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// noteForeign records that a message written with the key named id, not
// held here, was read on topic; a key not seen in the last foreignKept is
// logged as a warning.
func (m *Manager) noteForeign(topic, id string) {
	if len(id) > 2*keyIDBytes {
		id = id[:2*keyIDBytes]
	}
	now := time.Now()
	m.fmu.Lock()
	last, seen := m.foreign[id]
	if !seen && len(m.foreign) >= 64 {
		m.fmu.Unlock()
		return // a flood of made-up ids: the count says it
	}
	m.foreign[id] = now
	m.fmu.Unlock()
	if !seen || now.Sub(last) > foreignKept {
		m.log.Warn("operations: a gateway writes on the operations topics with a key this one does not hold — another deployment on the same topics, or replicas given different keys; its records are refused here",
			"topic", topic, "foreign_key", id, "keys", m.opts.Keys.IDs())
	}
}

// WhenReady returns a channel closed once Ready first holds.
func (m *Manager) WhenReady() <-chan struct{} { return m.ready }

// noteReady closes the WhenReady channel if Ready holds.
func (m *Manager) noteReady() {
	if m.Ready() {
		m.readyOnce.Do(func() { close(m.ready) })
	}
}

// Run reads the state table, consumes replies and sweeps expired
// operations until ctx ends. It returns once its reader and its
// subscription are closed, which waits for the broker: a caller that
// must stop in time waits for it within a bound (Unsent then says what
// was not written).
func (m *Manager) Run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { m.stopOnce.Do(func() { close(m.stopped) }) })
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { m.follow(ctx) })
	wg.Go(func() { m.consume(ctx) })
	wg.Go(func() { m.sweep(ctx) })
	wg.Wait()
}

// Unsent counts the records and chunks this gateway is writing now —
// an operation's start or end, a chunk of its answer, a deletion — whose
// receipt the broker has not sent yet: at shutdown, with the broker away,
// what may never be written (a reply not recorded is delivered again, to
// another gateway).
func (m *Manager) Unsent() int64 { return m.writing.Load() }

// publish writes msg on topic, counted in Unsent while it is under way.
func (m *Manager) publish(ctx context.Context, topic string, msg transport.Message) error {
	m.writing.Add(1)
	defer m.writing.Add(-1)
	return m.bus.Publish(ctx, topic, msg)
}

// Stats are counters for metrics.
type Stats struct {
	// Started: operations this gateway started. Done, Failed, Cancelled:
	// final states this gateway recorded. Expired: operations this
	// gateway started whose deadline passed with no reply. Told: cancels
	// this gateway sent to tool services.
	Started, Done, Failed, Cancelled, Expired, Told int64
	Running                                         int // running operations in the table
	Table                                           int // operations in the table
	// TableLag is how long the last record read from the state table
	// took from its writer's publish to this gateway's table (the
	// writers' clocks may differ).
	TableLag time.Duration
	// Refused counts the messages refused on the state and chunk
	// topics, by reason (RefusedUnsigned, RefusedSignature,
	// RefusedMalformed, RefusedTopic, RefusedUnknownKey; each reason
	// present).
	Refused map[string]int64
	// ForeignKeys counts the keys not held here that messages read on
	// the operations topics were written with lately (Foreign).
	ForeignKeys int
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	m.mu.RLock()
	n, running := len(m.table), 0
	for _, r := range m.table {
		if !r.Finished() {
			running++
		}
	}
	m.mu.RUnlock()
	refused := make(map[string]int64, len(refusedReasons))
	for i, r := range refusedReasons {
		refused[r] = m.refused[i].Load()
	}
	return Stats{Started: m.started.Load(), Done: m.done.Load(), Failed: m.failed.Load(), Cancelled: m.cancelled.Load(),
		Expired: m.expired.Load(), Told: m.told.Load(), Running: running, Table: n, TableLag: time.Duration(m.lag.Load()),
		Refused: refused, ForeignKeys: len(m.Foreign())}
}
