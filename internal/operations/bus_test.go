package operations

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// memBus is an in-memory Bus for the unit tests: every topic is a log that
// readers replay from its start and then follow; ConsumeAsync keeps the
// reply handler for the test to deliver to (deliver).
type memBus struct {
	mu      sync.Mutex
	logs    map[string][]transport.Message
	changed chan struct{} // closed and replaced on every publish
	reply   func(transport.Message, func(bool))
	// failFollow, when set, is returned by the next Follow (then cleared).
	failFollow error
}

func newMemBus() *memBus {
	return &memBus{logs: map[string][]transport.Message{}, changed: make(chan struct{})}
}

func (b *memBus) Publish(ctx context.Context, topic string, msg transport.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	msg.PublishTime = time.Now()
	b.mu.Lock()
	b.logs[topic] = append(b.logs[topic], msg)
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
	return nil
}

// published returns what topic holds.
func (b *memBus) published(topic string) []transport.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]transport.Message(nil), b.logs[topic]...)
}

// from returns topic's messages from index i on and the channel closed on
// the next publish.
func (b *memBus) from(topic string, i int) ([]transport.Message, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]transport.Message(nil), b.logs[topic][min(i, len(b.logs[topic])):]...), b.changed
}

// read hands topic's messages to apply, from the start and then as they
// come, until apply returns false or ctx ends; caughtUp is called once
// the messages there at the start were applied.
func (b *memBus) read(ctx context.Context, topic string, apply func(transport.Message) bool, caughtUp func()) error {
	next := 0
	for {
		msgs, changed := b.from(topic, next)
		for _, msg := range msgs {
			next++
			if !apply(msg) {
				return nil
			}
		}
		if caughtUp != nil {
			caughtUp()
			caughtUp = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

func (b *memBus) Follow(ctx context.Context, topic, _ string, apply func(transport.Message), caughtUp func()) error {
	b.mu.Lock()
	err := b.failFollow
	b.failFollow = nil
	b.mu.Unlock()
	if err != nil {
		return err
	}
	return b.read(ctx, topic, func(m transport.Message) bool { apply(m); return true }, caughtUp)
}

func (b *memBus) ReadSince(ctx context.Context, topic, _ string, _ time.Time, apply func(transport.Message) bool) error {
	return b.read(ctx, topic, apply, nil)
}

func (b *memBus) ReadRange(_ context.Context, topic, _ string, _ time.Time, apply func(transport.Message)) error {
	for _, msg := range b.published(topic) {
		apply(msg)
	}
	return nil
}

type memSub struct {
	b *memBus
}

func (s memSub) Close() error {
	s.b.mu.Lock()
	s.b.reply = nil
	s.b.mu.Unlock()
	return nil
}

func (b *memBus) ConsumeAsync(ctx context.Context, _, _ string, _ transport.SubscriptionType, h func(transport.Message, func(bool))) (transport.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.reply = h
	b.mu.Unlock()
	return memSub{b}, nil
}

// deliver hands msg to the reply consumer and returns whether it was
// acknowledged.
func (b *memBus) deliver(t *testing.T, msg transport.Message) bool {
	t.Helper()
	b.mu.Lock()
	h := b.reply
	b.mu.Unlock()
	if h == nil {
		t.Fatal("no reply consumer attached")
	}
	acked := make(chan bool, 1)
	h(msg, func(ack bool) { acked <- ack })
	select {
	case ack := <-acked:
		return ack
	case <-time.After(10 * time.Second):
		t.Fatal("a reply was neither acknowledged nor handed back")
		return false
	}
}

// failingCaller refuses every request with err.
type failingCaller struct{ err error }

func (c failingCaller) Call(context.Context, bridge.Target, wire.Request, bridge.CallOptions) (*bridge.Call, error) {
	return nil, c.err
}

var errRefused = errors.New("refused by the test")

// newTestManager returns a Manager on a fresh memBus, its follower
// reading the table (an end written is applied once read back) until the
// test ends.
func newTestManager(t *testing.T, opts Options) (*Manager, *memBus) {
	t.Helper()
	b := newMemBus()
	if opts.Keys == nil {
		opts.Keys = testKeys(t, 1)
	}
	m, err := New(b, failingCaller{errRefused}, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.follow(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually.True(t, 10*time.Second, "the table read", m.caughtUp.Load)
	return m, b
}

// running puts a running record of owner's for tool echo, its deadline an
// hour away, and returns it.
func putRunning(t *testing.T, m *Manager, owner string) Record {
	t.Helper()
	now := time.Now()
	r := Record{ID: newID(), Owner: owner, Tool: "echo", State: Running, CreateMS: now.UnixMilli(), DeadlineMS: now.Add(time.Hour).UnixMilli()}
	if err := m.put(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	return r
}

// reply is a reply message of operation id: resp, with sequence number
// seq unless it is negative.
func reply(id string, seq int, resp wire.Response) transport.Message {
	props := map[string]string{wire.PropID: id}
	if seq >= 0 {
		props[wire.PropSeq] = strconv.Itoa(seq)
	}
	return transport.Message{Key: id, Payload: wire.EncodeResponse(resp), Properties: props}
}

// newID makes an id of the older form: 32 hex digits, no time, no tag.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
