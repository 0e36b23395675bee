package operations

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
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
	// refusedWarnEvery: messages refused on the operations topics are
	// logged at warning level at most this often (each at debug level),
	// so that a flood of them cannot fill the log.
	refusedWarnEvery = time.Minute
)

// Bus is what the Manager needs of the broker (transport.Pulsar).
type Bus interface {
	Publish(ctx context.Context, topic string, msg transport.Message) error
	ConsumeAsync(ctx context.Context, topic, subscription string, typ transport.SubscriptionType, h func(m transport.Message, done func(ack bool))) (transport.Subscription, error)
	Follow(ctx context.Context, topic, name string, apply func(transport.Message), caughtUp func()) error
	ReadSince(ctx context.Context, topic, name string, since time.Time, apply func(transport.Message) bool) error
	ReadRange(ctx context.Context, topic, name string, since time.Time, apply func(transport.Message)) error
}

// Caller publishes a request (the bridge).
type Caller interface {
	CallWith(ctx context.Context, t bridge.Target, req wire.Request, deadline time.Time, o bridge.CallOptions) (*bridge.Call, error)
}

// Options tune a Manager.
type Options struct {
	// Instance names this gateway in the records it writes.
	Instance string
	// StateTopic is the state table (DefaultStateTopic); ReplyTopic the
	// topic requests of operations name in reply-to
	// (wire.OperationsTopic); Subscription the one subscription of every
	// gateway to it (DefaultSubscription); ChunkTopic the topic the chunks
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

	mu        sync.RWMutex
	table     map[string]Record
	runningBy map[string]int // records of table stored as running, by owner
	changed   chan struct{}  // closed and replaced on every change
	caughtUp  atomic.Bool
	consumed  atomic.Bool
	ready     chan struct{} // closed once Ready first holds (readyOnce)
	readyOnce sync.Once
	lag       atomic.Int64 // of the last record read live: now − its publish time, ns

	lmu   sync.Mutex
	local map[string]*bridge.Call // operations this gateway started, still waited for

	started, told                    atomic.Int64
	done, failed, cancelled, expired atomic.Int64 // final states recorded (expired: counted by await)

	refused     [len(refusedReasons)]atomic.Int64 // messages refused, by reason (refusedReasons)
	refusedWarn atomic.Int64                      // when a refusal was last logged as a warning, unix ns
}

type partial struct {
	sb      strings.Builder
	next    int // the sequence number due next
	written int // chunks written to the chunk topic
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
	return &Manager{bus: bus, calls: calls, opts: opts, log: opts.Logger,
		table: map[string]Record{}, runningBy: map[string]int{}, changed: make(chan struct{}),
		ready: make(chan struct{}), local: map[string]*bridge.Call{}}, nil
}

// Ready reports whether the table has been read to its end and the reply
// subscription is attached.
func (m *Manager) Ready() bool { return m.caughtUp.Load() && m.consumed.Load() }

// WhenReady returns a channel closed once Ready first holds.
func (m *Manager) WhenReady() <-chan struct{} { return m.ready }

// noteReady closes the WhenReady channel if Ready holds.
func (m *Manager) noteReady() {
	if m.Ready() {
		m.readyOnce.Do(func() { close(m.ready) })
	}
}

// Run reads the state table, consumes replies and sweeps expired
// operations until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { m.follow(ctx) })
	wg.Go(func() { m.consume(ctx) })
	wg.Go(func() { m.sweep(ctx) })
	wg.Wait()
}

func (m *Manager) follow(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		// A fresh read builds a fresh table, swapped in once caught up:
		// deletions missed meanwhile are not kept.
		building, counts := map[string]Record{}, map[string]int{}
		live := false
		apply := func(msg transport.Message) {
			if live {
				if !msg.PublishTime.IsZero() {
					m.lag.Store(int64(time.Since(msg.PublishTime)))
				}
				m.apply(msg)
				return
			}
			if r, ok := m.admit(msg); ok {
				applyTo(building, counts, msg.Key, r)
			}
		}
		err := m.bus.Follow(ctx, m.opts.StateTopic, "toolgate-operations-table", apply, func() {
			m.mu.Lock()
			m.table, m.runningBy = building, counts
			n := len(building) // the table is the calls' from here on
			m.notifyLocked()
			m.mu.Unlock()
			live = true
			if !m.caughtUp.Swap(true) {
				m.log.Info("operations table read", "topic", m.opts.StateTopic, "operations", n)
			}
			m.noteReady()
		})
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("reading the operations table failed; reading it again", "topic", m.opts.StateTopic, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// admit checks a message read from the state table, as anything from the
// bus: signed with one of the deployment's keys (and decrypted with it), a
// valid record (or a
// tombstone: a nil record), naming only an allowed topic. A message
// refused is counted and logged (refuse); ok is false then.
func (m *Manager) admit(msg transport.Message) (r *Record, ok bool) {
	plain, err := m.opts.Keys.unprotect(kindRecord, msg)
	if err != nil {
		m.refuse(refusedReason(err), m.opts.StateTopic, msg.Key, err)
		return nil, false
	}
	if len(msg.Payload) == 0 {
		return nil, true
	}
	rec, err := decodeRecord(msg.Key, plain)
	if err != nil {
		m.refuse(RefusedMalformed, m.opts.StateTopic, msg.Key, err)
		return nil, false
	}
	if rec.Topic != "" && m.opts.TopicAllowed != nil {
		if err := m.opts.TopicAllowed(rec.Topic); err != nil {
			m.refuse(RefusedTopic, m.opts.StateTopic, msg.Key, err)
			return nil, false
		}
	}
	return &rec, true
}

// refuse counts a message refused on topic for reason, and logs its
// cause: at debug level, and at warning level at most once every
// refusedWarnEvery.
func (m *Manager) refuse(reason, topic, key string, err error) {
	for i, r := range refusedReasons {
		if r == reason {
			m.refused[i].Add(1)
		}
	}
	if len(key) > 100 {
		key = key[:100] + "…"
	}
	m.log.Debug("operations: message refused", "topic", topic, "key", key, "reason", reason, "err", err)
	now, last := time.Now().UnixNano(), m.refusedWarn.Load()
	if now-last >= int64(refusedWarnEvery) && m.refusedWarn.CompareAndSwap(last, now) {
		m.log.Warn("operations: messages refused on the operations topics (counted in toolgate_operations_records_refused_total; each logged at debug level)",
			"topic", topic, "key", key, "reason", reason, "err", err)
	}
}

// applyTo applies one state table entry to t: the record r under key, or
// key's tombstone (r nil). A running record never
// replaces a finished one: running is written first, so it is the older.
// Nor does a done or failed record replace a cancelled one: the cancel
// tells the tool service, whose answer (often the error of its ended
// context) may reach a gateway whose table has not shown the cancel yet;
// the caller's cancel stands, on every gateway reading the table.
// running counts the records of t stored as running, per owner.
func applyTo(t map[string]Record, running map[string]int, key string, rec *Record) (Record, bool) {
	old, had := t[key]
	if rec == nil {
		delete(t, key)
		if had {
			countRunning(running, old, -1)
		}
		return Record{}, false
	}
	r := *rec
	if had && (old.Finished() && !r.Finished() || old.State == Cancelled && r.State != Cancelled) {
		return old, true
	}
	if had {
		countRunning(running, old, -1)
	}
	t[r.ID] = r
	countRunning(running, r, 1)
	return r, true
}

// countRunning adds d to the count of r's owner when r is stored running.
func countRunning(running map[string]int, r Record, d int) {
	if r.State != Running {
		return
	}
	if n := running[r.Owner] + d; n > 0 {
		running[r.Owner] = n
	} else {
		delete(running, r.Owner)
	}
}

// apply applies a message read live from the state table, once admitted.
func (m *Manager) apply(msg transport.Message) {
	if r, ok := m.admit(msg); ok {
		m.applyEntry(msg.Key, r)
	}
}

// applyEntry applies the record r under key, or key's tombstone (r nil),
// to the table.
func (m *Manager) applyEntry(key string, rec *Record) {
	m.mu.Lock()
	r, ok := applyTo(m.table, m.runningBy, key, rec)
	m.notifyLocked()
	m.mu.Unlock()
	if !ok || r.Finished() {
		// Finished (or gone) elsewhere: the wait for its reply here is
		// over. The service is not told from here: a reply ended it, or
		// the gateway that cancelled or deleted it told the service.
		m.lmu.Lock()
		c := m.local[key]
		delete(m.local, key)
		m.lmu.Unlock()
		if c != nil {
			c.Drop()
		}
	}
}

func (m *Manager) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// lookup returns the record of id and the channel closed on the next change.
func (m *Manager) lookup(id string) (Record, bool, <-chan struct{}) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.table[id]
	return r, ok, m.changed
}

// put writes r to the state table, encrypted and signed, waiting for the
// broker's receipt, and applies it here at once.
func (m *Manager) put(ctx context.Context, r Record) error {
	r.Gateway = m.opts.Instance
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	msg := transport.Message{Key: r.ID, Payload: b}
	if err := m.opts.Keys.protect(kindRecord, &msg); err != nil {
		return err
	}
	if err := m.bus.Publish(ctx, m.opts.StateTopic, msg); err != nil {
		return fmt.Errorf("recording operation %s: %w", r.ID, err)
	}
	m.applyEntry(r.ID, &r)
	return nil
}

// remove writes id's tombstone, signed.
func (m *Manager) remove(ctx context.Context, id string) error {
	msg := transport.Message{Key: id}
	if err := m.opts.Keys.protect(kindRecord, &msg); err != nil {
		return err
	}
	if err := m.bus.Publish(ctx, m.opts.StateTopic, msg); err != nil {
		return fmt.Errorf("deleting operation %s: %w", id, err)
	}
	m.applyEntry(id, nil)
	return nil
}

// StartSpec is an operation to start: the request the core made of a
// call, and whose it is.
type StartSpec struct {
	Owner    string
	Tool     string
	Target   bridge.Target
	Request  wire.Request
	Deadline time.Time
}

// Start records the operation as running, then publishes its request. An
// error from the bridge is returned as it is; the record is removed again.
func (m *Manager) Start(ctx context.Context, s StartSpec) (Record, error) {
	if !m.caughtUp.Load() {
		return Record{}, ErrNotReady
	}
	if len(s.Owner) > maxOwnerBytes || len(s.Tool) > maxToolNameBytes {
		return Record{}, fmt.Errorf("%w: the caller's identity (%d bytes) or the tool's name (%d bytes) is over %d bytes",
			ErrTooLong, len(s.Owner), len(s.Tool), maxOwnerBytes)
	}
	now := time.Now()
	if n := m.running(s.Owner, now, m.opts.MaxPerOwner); n >= m.opts.MaxPerOwner {
		return Record{}, fmt.Errorf("%w: %d of at most %d", ErrTooMany, n, m.opts.MaxPerOwner)
	}
	topic := s.Target.RequestTopic
	if m.opts.TopicAllowed != nil && m.opts.TopicAllowed(topic) != nil {
		topic = "" // every table would refuse the record: recorded without it
	}
	r := Record{ID: newID(), Owner: s.Owner, Tool: s.Tool, State: Running, CreateMS: now.UnixMilli(), DeadlineMS: s.Deadline.UnixMilli(), Topic: topic}
	if err := m.put(ctx, r); err != nil {
		return Record{}, fmt.Errorf("%w: %w", bridge.ErrUnavailable, err)
	}
	// The request outlives the caller's request: it is the operation's.
	call, err := m.calls.CallWith(context.WithoutCancel(ctx), s.Target, s.Request, s.Deadline,
		bridge.CallOptions{ID: r.ID, ReplyTo: m.opts.ReplyTopic, NoCredit: true, Detached: true})
	if err != nil {
		if rerr := m.remove(context.WithoutCancel(ctx), r.ID); rerr != nil {
			m.log.Warn("an operation that could not start stays in the table until its deadline", "id", r.ID, "err", rerr)
		}
		return Record{}, err
	}
	m.started.Add(1)
	m.lmu.Lock()
	m.local[r.ID] = call
	m.lmu.Unlock()
	if cur, ok, _ := m.lookup(r.ID); !ok || cur.Finished() {
		call.Close() // finished elsewhere already: apply did not see the call
	}
	go m.await(r.ID, call)
	return r, nil
}

// await waits for the reply on the service's response topic (a service
// that ignores reply-to) and records it. Replies on the reply topic are
// the consumer's; once the table shows the operation finished, apply
// closes the call and await ends without recording.
func (m *Manager) await(id string, call *bridge.Call) {
	defer func() {
		m.lmu.Lock()
		delete(m.local, id)
		m.lmu.Unlock()
		call.Close()
	}()
	text, err := call.Wait(context.Background())
	var se *wire.Error
	switch {
	case err == nil:
		m.finishLogged(id, Done, text, nil)
	case errors.As(err, &se):
		m.finishLogged(id, Failed, "", &Failure{Type: se.Type, Message: se.Message})
	case errors.Is(err, bridge.ErrLostReplies):
		m.finishLogged(id, Failed, "", &Failure{Reason: ReasonLost, Message: err.Error()})
	case errors.Is(err, bridge.ErrBadReply):
		m.finishLogged(id, Failed, "", &Failure{Reason: ReasonBadReply, Message: "the tool service sent a malformed reply"})
	case errors.Is(err, context.DeadlineExceeded):
		// The deadline passed with no reply: every table shows it failed
		// (Record.Now); the gateway that started it counts it.
		if r, ok, _ := m.lookup(id); ok && !r.Finished() {
			m.expired.Add(1)
		}
	}
}

func (m *Manager) finishLogged(id string, st State, out string, f *Failure) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.finish(ctx, id, st, out, f, 0); err != nil {
		m.log.Warn("cannot record an operation's end", "id", id, "err", err)
	}
}

// finish records id's end unless it has ended already; chunks is how
// many chunks of the answer are on the chunk topic.
func (m *Manager) finish(ctx context.Context, id string, st State, out string, f *Failure, chunks int) error {
	r, ok, _ := m.lookup(id)
	now := time.Now()
	if !ok || r.Now(now).Finished() {
		return nil
	}
	if len(out) > m.opts.MaxOutput {
		st, out, f = Failed, "", &Failure{Reason: ReasonTooLarge, Message: fmt.Sprintf("the output is larger than the %d bytes an operation keeps", m.opts.MaxOutput)}
	}
	r.State, r.Output, r.Failure, r.EndMS, r.Chunks = st, out, f, now.UnixMilli(), chunks
	if err := m.put(ctx, r); err != nil {
		return err
	}
	switch st {
	case Done:
		m.done.Add(1)
	case Failed:
		m.failed.Add(1)
	case Cancelled:
		m.cancelled.Add(1)
	}
	return nil
}

// running counts owner's running operations. The count of records
// stored as running bounds it from above (a record past its deadline
// stays stored as running): only when that bound reaches max are the
// owner's records looked at one by one.
func (m *Manager) running(owner string, now time.Time, max int) int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if n := m.runningBy[owner]; n < max {
		return n
	}
	n := 0
	for _, r := range m.table {
		if r.Owner == owner && !r.Now(now).Finished() {
			n++
		}
	}
	return n
}

// replyLanes is how many replies of different operations are handled at
// once: each waits for its record's write, so one lane would bound a
// gateway to one write's round trip per reply.
const replyLanes = 16

// replyLane handles the replies of the operations whose ids hash to it,
// in the order they come; partial is its operations' answers so far.
type replyLane struct {
	in      chan laneMsg
	partial map[string]*partial
}

type laneMsg struct {
	msg  transport.Message
	done func(ack bool)
}

func laneOf(id string) int {
	h := uint32(2166136261) // FNV-1a
	for i := range len(id) {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return int(h % replyLanes)
}

func (m *Manager) consume(ctx context.Context) {
	var lanes [replyLanes]*replyLane
	var wg sync.WaitGroup
	for i := range lanes {
		l := &replyLane{in: make(chan laneMsg, 64), partial: map[string]*partial{}}
		lanes[i] = l
		wg.Go(func() {
			for lm := range l.in {
				lm.done(m.onReply(l, lm.msg))
			}
		})
	}
	defer func() {
		for _, l := range lanes {
			close(l.in)
		}
		wg.Wait()
	}()
	dispatch := func(msg transport.Message, done func(bool)) {
		lanes[laneOf(msg.Properties[wire.PropID])].in <- laneMsg{msg: msg, done: done}
	}
	backoff := 250 * time.Millisecond
	for {
		sub, err := m.bus.ConsumeAsync(ctx, m.opts.ReplyTopic, m.opts.Subscription, transport.KeyShared, dispatch)
		if err == nil {
			m.consumed.Store(true)
			m.noteReady()
			m.log.Info("consuming operation replies", "topic", m.opts.ReplyTopic, "subscription", m.opts.Subscription)
			<-ctx.Done()
			m.consumed.Store(false)
			_ = sub.Close() // no more dispatches once it returns
			return
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("cannot consume operation replies; retrying", "topic", m.opts.ReplyTopic, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// onReply takes one reply message of an operation, on its lane; true
// acknowledges it. What comes from the bus is checked: the id is an
// operation of the table and running, the payload a response, the replies
// in sequence.
func (m *Manager) onReply(l *replyLane, msg transport.Message) bool {
	id := msg.Properties[wire.PropID]
	if !validID(id) {
		m.log.Warn("operation reply without a valid id dropped", "id", id)
		return true
	}
	r, ok := m.recordOf(id)
	if !ok {
		if msg.Redeliveries >= maxRedeliveries {
			m.log.Warn("reply for an operation no table shows dropped", "id", id, "deliveries", msg.Redeliveries+1)
			return true
		}
		return false // the table may lag: deliver it again
	}
	if r.Now(time.Now()).Finished() {
		delete(l.partial, id)
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := l.partial[id]
	if p == nil {
		p = &partial{}
		if s := msg.Properties[wire.PropSeq]; s != "" && s != "0" {
			// Replies of this operation went to another gateway before
			// (it stopped): the chunks it kept are the answer so far.
			if err := m.rejoin(ctx, r, p); err != nil {
				m.log.Warn("cannot read the chunks kept of an operation taken over; the reply will come again", "id", id, "err", err)
				return false
			}
		}
		l.partial[id] = p
	}
	end := func(st State, out string, f *Failure) bool {
		if err := m.finish(ctx, id, st, out, f, p.written); err != nil {
			m.log.Warn("cannot record an operation's end; the reply will come again", "id", id, "err", err)
			return false
		}
		delete(l.partial, id)
		return true
	}
	resp, err := wire.DecodeResponse(msg.Payload)
	if err != nil {
		return end(Failed, "", &Failure{Reason: ReasonBadReply, Message: "the tool service sent a malformed reply"})
	}
	seq := -1
	if s := msg.Properties[wire.PropSeq]; s != "" {
		n, err := strconv.Atoi(s)
		switch {
		case err != nil:
			return end(Failed, "", &Failure{Reason: ReasonBadReply, Message: "the tool service sent a malformed reply"})
		case n < p.next:
			return true // a replay
		case n > p.next:
			return end(Failed, "", &Failure{Reason: ReasonLost, Message: fmt.Sprintf("%d reply message(s) of this operation were lost", n-p.next)})
		}
		seq = n
	}
	if resp.Error != nil {
		return end(Failed, "", &Failure{Type: resp.Error.Type, Message: resp.Error.Message})
	}
	if p.sb.Len()+len(resp.Response) > m.opts.MaxOutput {
		return end(Failed, "", &Failure{Reason: ReasonTooLarge, Message: fmt.Sprintf("the output is larger than the %d bytes an operation keeps", m.opts.MaxOutput)})
	}
	// An answer in several messages is kept chunk by chunk for Stream; one
	// in a single message is all in the record.
	if !resp.EndOfStream || p.written > 0 {
		if err := m.writeChunk(ctx, id, p.written, resp.Response, resp.EndOfStream); err != nil {
			m.log.Warn("cannot keep a chunk of an operation's answer; the reply will come again", "id", id, "chunk", p.written, "err", err)
			return false
		}
		p.written++
	}
	if seq >= 0 {
		p.next = seq + 1
	}
	p.sb.WriteString(resp.Response)
	if !resp.EndOfStream {
		return true
	}
	return end(Done, p.sb.String(), nil)
}

// rejoin fills p with the chunks of r's answer kept on the chunk topic:
// the longest run from chunk 0, the sequence number due next being the
// chunk's (the Go SDK numbers an answer's messages from 0, one chunk
// each).
func (m *Manager) rejoin(ctx context.Context, r Record, p *partial) error {
	kept := map[int]string{}
	err := m.bus.ReadRange(ctx, m.opts.ChunkTopic, "toolgate-operation-rejoin", time.UnixMilli(r.CreateMS).Add(-clockSlack), func(msg transport.Message) {
		if msg.Key != r.ID {
			return
		}
		text, ok := m.chunkText(msg)
		if !ok {
			return
		}
		if i, err := strconv.Atoi(msg.Properties[wire.PropSeq]); err == nil && i >= 0 {
			kept[i] = text
		}
	})
	if err != nil {
		return err
	}
	for {
		text, ok := kept[p.written]
		if !ok {
			break
		}
		p.sb.WriteString(text)
		p.written++
	}
	p.next = p.written
	m.log.Info("operation taken over: chunks kept so far rejoined", "id", r.ID, "chunks", p.written)
	return nil
}

// writeChunk keeps chunk i of operation id's answer on the chunk topic,
// waiting for the broker's receipt.
func (m *Manager) writeChunk(ctx context.Context, id string, i int, text string, last bool) error {
	props := map[string]string{wire.PropSeq: strconv.Itoa(i)}
	if last {
		props[propLast] = "true"
	}
	msg := transport.Message{Key: id, Payload: []byte(text), Properties: props}
	if err := m.opts.Keys.protect(kindChunk, &msg); err != nil {
		return err
	}
	return m.bus.Publish(ctx, m.opts.ChunkTopic, msg)
}

// chunkText checks a chunk read from the chunk topic, signed with one of
// the deployment's keys, and returns its text decrypted. One refused is
// counted and logged (refuse).
func (m *Manager) chunkText(msg transport.Message) (string, bool) {
	text, err := m.opts.Keys.unprotect(kindChunk, msg)
	if err != nil {
		m.refuse(refusedReason(err), m.opts.ChunkTopic, msg.Key, err)
		return "", false
	}
	return string(text), true
}

// recordOf returns id's record, waiting up to lagWait for it to reach the
// table.
func (m *Manager) recordOf(id string) (Record, bool) {
	t := time.NewTimer(lagWait)
	defer t.Stop()
	for {
		r, ok, changed := m.lookup(id)
		if ok {
			return r, true
		}
		select {
		case <-changed:
		case <-t.C:
			return Record{}, false
		}
	}
}

func (m *Manager) sweep(ctx context.Context) {
	t := time.NewTicker(m.opts.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var expired []string
		m.mu.RLock()
		for id, r := range m.table {
			if r.expired(now, m.opts.TTL) {
				expired = append(expired, id)
			}
		}
		m.mu.RUnlock()
		for _, id := range expired {
			if err := m.remove(ctx, id); err != nil {
				m.log.Warn("cannot delete an expired operation", "id", id, "err", err)
				break
			}
		}
		if len(expired) > 0 {
			m.log.Debug("expired operations deleted", "count", len(expired))
		}
	}
}

// Get returns owner's operation id as it stands now.
func (m *Manager) Get(owner, id string) (Record, error) {
	r, ok, _ := m.lookup(id)
	now := time.Now()
	if !ok || r.Owner != owner || r.expired(now, m.opts.TTL) {
		return Record{}, ErrNotFound
	}
	return r.Now(now), nil
}

// List returns owner's operations sorted by id; done, when set, keeps
// only the finished (true) or running (false) ones.
func (m *Manager) List(owner string, done *bool) []Record {
	now := time.Now()
	var out []Record
	m.mu.RLock()
	for _, r := range m.table {
		if r.Owner != owner || r.expired(now, m.opts.TTL) {
			continue
		}
		r = r.Now(now)
		if done != nil && r.Finished() != *done {
			continue
		}
		out = append(out, r)
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Cancel records owner's operation id as cancelled, unless it has ended,
// and tells its tool service (tell).
func (m *Manager) Cancel(ctx context.Context, owner, id string) (Record, error) {
	r, err := m.Get(owner, id)
	if err != nil {
		return Record{}, err
	}
	if err := m.finish(ctx, id, Cancelled, "", &Failure{Reason: ReasonCancelled, Message: "the operation was cancelled"}, 0); err != nil {
		return Record{}, err
	}
	got, err := m.Get(owner, id)
	if err == nil && !r.Finished() && got.State == Cancelled {
		m.tell(ctx, r)
	}
	return got, err
}

// Delete removes owner's operation id from the table; a running one's
// tool service is told (tell).
func (m *Manager) Delete(ctx context.Context, owner, id string) error {
	r, err := m.Get(owner, id)
	if err != nil {
		return err
	}
	if err := m.remove(ctx, id); err != nil {
		return err
	}
	if !r.Finished() {
		m.tell(ctx, r)
	}
	return nil
}

// tell asks r's tool service to stop it, on the service's cancel topic
// (wire.CancelTopic) as the bridge does for a call given up: every
// instance of a Go SDK service reads it, and the one running the request
// of id r.ID ends its context. Services that do not read it run the
// request to its end; its reply is then dropped, the operation having
// ended. A record without a topic (written by an older gateway) is not
// told.
func (m *Manager) tell(ctx context.Context, r Record) {
	if r.Topic == "" {
		return
	}
	topic := wire.CancelTopic(r.Topic)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := m.bus.Publish(ctx, topic, transport.Message{Payload: []byte(wire.CreditCancel),
		Properties: map[string]string{wire.PropID: r.ID, wire.PropCredit: wire.CreditCancel}}); err != nil {
		m.log.Warn("cannot tell a tool service that an operation was cancelled", "cancel_topic", topic, "id", r.ID, "err", err)
		return
	}
	m.told.Add(1)
}

// Wait returns owner's operation id once it has ended, or as it stands
// when timeout passes or ctx ends.
func (m *Manager) Wait(ctx context.Context, owner, id string, timeout time.Duration) (Record, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		_, _, changed := m.lookup(id) // before the read: no change is missed
		r, err := m.Get(owner, id)
		if err != nil || r.Finished() {
			return r, err
		}
		// The deadline passing changes the record without a message.
		dl := time.NewTimer(time.Until(time.UnixMilli(r.DeadlineMS+deadlineSlackMS+1)) + time.Millisecond)
		select {
		case <-changed:
		case <-dl.C:
		case <-t.C:
			dl.Stop()
			return m.Get(owner, id)
		case <-ctx.Done():
			dl.Stop()
			return r, nil
		}
		dl.Stop()
	}
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
	// RefusedMalformed, RefusedTopic; each reason present).
	Refused map[string]int64
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	now := time.Now()
	m.mu.RLock()
	n, running := len(m.table), 0
	for _, r := range m.table {
		if !r.Now(now).Finished() {
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
		Refused: refused}
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Stream hands owner's operation id's answer to emit chunk by chunk, in
// order and each once, from chunk from on: the chunks kept so far, then
// each as it comes, until the last. Any gateway can serve it: the chunks
// are read from the chunk topic. An answer that came in one message is
// one chunk (index 0), emitted once the operation is done. Stream returns
// the record as it stands at the end: an operation that failed, was
// cancelled or passed its deadline ends the stream after the chunks
// recorded before that, and the caller reports the record's failure. The
// error is emit's, ctx's, ErrNotFound (also when the operation is
// deleted meanwhile), ErrChunksLost or ErrUnavailable.
func (m *Manager) Stream(ctx context.Context, owner, id string, from int, emit func(i int, text string, last bool) error) (Record, error) {
	r, err := m.Get(owner, id)
	if err != nil {
		return Record{}, err
	}
	if r.Finished() && r.Chunks == 0 {
		if r.State == Done && from == 0 {
			return r, emit(0, r.Output, true)
		}
		return r, nil
	}
	type chunk struct {
		i    int
		text string
		last bool
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan chunk, 64)
	readErr := make(chan error, 1)
	since := time.UnixMilli(r.CreateMS).Add(-clockSlack)
	go func() {
		readErr <- m.bus.ReadSince(rctx, m.opts.ChunkTopic, "toolgate-operation-stream", since, func(msg transport.Message) bool {
			if msg.Key != id {
				return true
			}
			text, ok := m.chunkText(msg)
			if !ok {
				return true
			}
			i, err := strconv.Atoi(msg.Properties[wire.PropSeq])
			if err != nil || i < 0 {
				m.log.Warn("operation chunk without a valid index ignored", "id", id, "index", msg.Properties[wire.PropSeq])
				return true
			}
			select {
			case chunks <- chunk{i: i, text: text, last: msg.Properties[propLast] == "true"}:
				return true
			case <-rctx.Done():
				return false
			}
		})
	}()
	next := 0 // the chunk due next from the topic
	var endedAt time.Time
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		_, _, changed := m.lookup(id) // before the read: no change is missed
		r, err = m.Get(owner, id)
		if err != nil {
			return Record{}, err
		}
		if r.Finished() {
			switch {
			case r.State == Done && r.Chunks == 0 && next == 0:
				// Answered in one message after all.
				if from == 0 {
					return r, emit(0, r.Output, true)
				}
				return r, nil
			case r.State != Done && next >= r.Chunks:
				return r, nil
			}
			if endedAt.IsZero() {
				endedAt = time.Now()
			}
		}
		if r.Finished() {
			wake.Reset(time.Until(endedAt.Add(lastChunkWait)))
		} else {
			// The deadline passing changes the record without a message.
			wake.Reset(time.Until(time.UnixMilli(r.DeadlineMS+deadlineSlackMS+1)) + time.Millisecond)
		}
		select {
		case c := <-chunks:
			switch {
			case c.i < next:
				continue // written twice (a gateway stopped between writing it and acknowledging its reply)
			case c.i > next:
				return r, fmt.Errorf("%w: chunk %d came after %d", ErrChunksLost, c.i, next-1)
			}
			next++
			if c.i >= from {
				if err := emit(c.i, c.text, c.last); err != nil {
					return r, err
				}
			}
			if c.last {
				return r, nil
			}
		case <-changed:
		case <-wake.C:
			if !endedAt.IsZero() && time.Since(endedAt) >= lastChunkWait {
				return r, fmt.Errorf("%w: the operation ended with %d chunks, %d of them found", ErrChunksLost, r.Chunks, next)
			}
		case err := <-readErr:
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			if err == nil {
				err = errors.New("the reader stopped")
			}
			return r, fmt.Errorf("%w: %w", ErrUnavailable, err)
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
}
