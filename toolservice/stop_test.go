package toolservice_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
)

// lostBroker is a client whose broker goes away once the service runs:
// its consumers hand over what the test delivers, its producers never
// have a receipt, and every close waits until release is closed.
type lostBroker struct {
	pulsar.Client
	release  chan struct{}
	requests chan pulsar.Message // to the request topic's consumer
}

func (c *lostBroker) CreateProducer(pulsar.ProducerOptions) (pulsar.Producer, error) {
	return &lostProducer{release: c.release}, nil
}

func (c *lostBroker) Subscribe(o pulsar.ConsumerOptions) (pulsar.Consumer, error) {
	in := make(chan pulsar.Message)
	if strings.HasSuffix(o.SubscriptionName, "-request") {
		in = c.requests
	}
	return &lostConsumer{in: in, closing: make(chan struct{}), release: c.release}, nil
}

type lostProducer struct {
	pulsar.Producer
	release chan struct{}
}

func (p *lostProducer) SendAsync(context.Context, *pulsar.ProducerMessage, func(pulsar.MessageID, *pulsar.ProducerMessage, error)) {
}

func (p *lostProducer) FlushWithCtx(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (p *lostProducer) Close() { <-p.release }

type lostConsumer struct {
	pulsar.Consumer
	in      chan pulsar.Message
	once    sync.Once
	closing chan struct{}
	release chan struct{}
}

func (c *lostConsumer) Receive(ctx context.Context) (pulsar.Message, error) {
	select {
	case m := <-c.in:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closing:
		return nil, errors.New("consumer closed")
	}
}

func (c *lostConsumer) Chan() <-chan pulsar.ConsumerMessage { return nil }

func (c *lostConsumer) Close() {
	c.once.Do(func() { close(c.closing) })
	<-c.release
}

type request struct {
	pulsar.Message
	payload []byte
	props   map[string]string
}

func (m request) Payload() []byte               { return m.payload }
func (m request) Properties() map[string]string { return m.props }

// syncBuffer is a log the service and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A service stopped with its broker gone returns within StopGrace and
// StopMargin: the call in flight cancelled at the end of the grace, its
// reply and the closes that wait for the broker left, said once, and
// ErrAbandoned.
func TestStopWithTheBrokerGone(t *testing.T) {
	t.Parallel()
	client := &lostBroker{release: make(chan struct{}), requests: make(chan pulsar.Message)}
	defer close(client.release)
	var logs syncBuffer
	const grace = 300 * time.Millisecond
	started := make(chan struct{})
	svc, err := toolservice.New(toolservice.Config{ID: "lost", Topic: "lost", StopGrace: grace,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		func(ctx context.Context, _ *toolservice.Request) (any, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}, toolservice.WithPulsarClient(client))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(ctx) }()
	select {
	case <-svc.Ready():
	case err := <-ran:
		t.Fatalf("Run: %v", err)
	}
	client.requests <- request{payload: wire.EncodeRequest(wire.Request{Arguments: "{}"}), props: map[string]string{wire.PropID: "call-1"}}
	<-started

	stop()
	stopped := time.Now()
	bound := grace + toolservice.StopMargin + time.Second
	select {
	case err := <-ran:
		took := time.Since(stopped)
		t.Logf("Run returned %v after its context ended (grace %v): %v", took.Round(time.Millisecond), grace, err)
		if !errors.Is(err, toolservice.ErrAbandoned) {
			t.Errorf("Run: %v, want ErrAbandoned", err)
		}
	case <-time.After(bound):
		t.Fatalf("Run still running %v after its context ended, with its broker gone (grace %v)", bound, grace)
	}
	if n := strings.Count(logs.String(), "abandoning what had not closed"); n != 1 {
		t.Errorf("%d lines on what was abandoned, want 1:\n%s", n, logs.String())
	}
}
