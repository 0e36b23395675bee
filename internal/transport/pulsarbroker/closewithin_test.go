package pulsarbroker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
)

// goneBroker is a client whose broker went away: what it made works until
// it is closed, and every close waits until release is closed (the
// client's closes wait for the broker's answer).
type goneBroker struct {
	pulsar.Client
	release chan struct{}
}

func (c *goneBroker) CreateProducer(pulsar.ProducerOptions) (pulsar.Producer, error) {
	return &goneProducer{release: c.release}, nil
}

func (c *goneBroker) Subscribe(pulsar.ConsumerOptions) (pulsar.Consumer, error) {
	return &goneConsumer{closable: newClosable(c.release)}, nil
}

func (c *goneBroker) CreateReader(pulsar.ReaderOptions) (pulsar.Reader, error) {
	return &goneReader{closable: newClosable(c.release)}, nil
}

func (c *goneBroker) Close() { <-c.release }

// closable is closed by Close, which then waits for release.
type closable struct {
	closing chan struct{}
	once    sync.Once
	release chan struct{}
}

func newClosable(release chan struct{}) closable {
	return closable{closing: make(chan struct{}), release: release}
}

func (c *closable) Close() {
	c.once.Do(func() { close(c.closing) })
	<-c.release
}

// wait waits for ctx or the close.
func (c *closable) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closing:
		return errors.New("closed")
	}
}

type goneProducer struct {
	pulsar.Producer
	release chan struct{}
}

func (p *goneProducer) SendAsync(_ context.Context, m *pulsar.ProducerMessage, f func(pulsar.MessageID, *pulsar.ProducerMessage, error)) {
	f(nil, m, nil)
}

func (p *goneProducer) Close() { <-p.release }

type goneConsumer struct {
	pulsar.Consumer
	closable
}

func (c *goneConsumer) Receive(ctx context.Context) (pulsar.Message, error) { return nil, c.wait(ctx) }

func (c *goneConsumer) Chan() <-chan pulsar.ConsumerMessage { return nil }

func (c *goneConsumer) Close() { c.closable.Close() }

type goneReader struct {
	pulsar.Reader
	closable
}

func (r *goneReader) HasNext() bool { return false }

func (r *goneReader) Next(ctx context.Context) (pulsar.Message, error) { return nil, r.wait(ctx) }

func (r *goneReader) Close() { r.closable.Close() }

// With the broker away, CloseWithin returns when its context ends, with
// what had not closed; the closes go on and end when the broker answers,
// and Close then returns.
func TestCloseWithinLeavesWhatWaitsForTheBroker(t *testing.T) {
	release := make(chan struct{})
	client := &goneBroker{release: release}
	b, err := New(Options{Client: client, DisableBatching: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b.shared = false // the client is b's own: Close closes it
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	const requests, flow, table = "non-persistent://tg/request/x", "non-persistent://tg/request/x.flow", "persistent://tg/operations/state"
	if _, err := b.Subscribe(t.Context(), requests, "x-request", transport.Shared, func(transport.Message) {}); err != nil {
		t.Fatal(err)
	}
	closed, err := b.Subscribe(t.Context(), flow, "x-flow", transport.Exclusive, func(transport.Message) {})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = closed.Close() }() // its owner closes it: waits for the broker too
	if err := b.Publish(t.Context(), "non-persistent://tg/response/x", transport.Message{Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	following := make(chan error, 1)
	go func() {
		following <- b.Follow(t.Context(), table, "table", func(transport.Message) {}, func() {})
	}()
	eventually.True(t, 10*time.Second, "the reader open", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.opened) == 3
	})

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	left := b.CloseWithin(ctx)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("CloseWithin returned %v after a 200 ms context", took)
	}
	want := Left{Subscriptions: []string{"table on " + table, "x-flow on " + flow, "x-request on " + requests},
		Producers: []string{"non-persistent://tg/response/x"}, Client: true}
	if !slices.Equal(left.Subscriptions, want.Subscriptions) || !slices.Equal(left.Producers, want.Producers) ||
		left.Client != want.Client || left.Empty() {
		t.Fatalf("left %+v, want %+v", left, want)
	}
	if _, err := b.Subscribe(t.Context(), requests, "late", transport.Shared, func(transport.Message) {}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Subscribe on a closing client: %v, want ErrClosed", err)
	}

	// The broker answers: the closes end, and the reader's Follow.
	close(release)
	released = true
	done := make(chan struct{})
	go func() { b.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once the broker answered")
	}
	if left := b.CloseWithin(t.Context()); !left.Empty() {
		t.Errorf("left after every close returned: %+v", left)
	}
	select {
	case err := <-following:
		if err == nil {
			t.Error("Follow returned nil once its reader was closed under it, want the reader's error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return once its reader closed")
	}
}

// A bound already over lists everything open: the closes have not begun.
func TestCloseWithinAnEndedContextListsEverything(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	b, err := New(Options{Client: &goneBroker{release: release}, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const requests, replies = "non-persistent://tg/request/x", "non-persistent://tg/response/x"
	if _, err := b.Subscribe(t.Context(), requests, "x-request", transport.Shared, func(transport.Message) {}); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(t.Context(), replies, transport.Message{Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	left := b.CloseWithin(ctx)
	if !slices.Equal(left.Subscriptions, []string{"x-request on " + requests}) || !slices.Equal(left.Producers, []string{replies}) || left.Client {
		t.Fatalf("left %+v, want the subscription and the producer (the client is the caller's)", left)
	}
}
