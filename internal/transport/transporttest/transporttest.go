// Package transporttest has the fake brokers unit tests and benchmarks
// share: Fake, a broker with no topics at all whose publishes a test
// answers itself; Hooked, the in-memory broker with a hook in front of
// every publish; and PulsarClient, a pulsar.Client over any of them, which
// runs a tool service on the SDK's public WithPulsarClient option. Contract
// tests still run on the real broker too.
package transporttest

import (
	"context"
	"sync"

	"github.com/toolgate/toolgate/internal/transport"
)

// Fake is a transport.Broker without a broker: Subscribe keeps the last
// handler, and every publish goes to OnPublish (nil: taken and dropped),
// which may answer through Deliver. Its error is the publish's outcome;
// with Later set, PublishAsync reports it from another goroutine, as the
// Pulsar transport does.
type Fake struct {
	OnPublish func(topic string, m transport.Message) error
	Later     bool

	mu      sync.Mutex
	h       transport.Handler
	byTopic map[string]transport.Handler
}

var _ transport.Broker = (*Fake)(nil)

// Publish hands m to OnPublish.
func (f *Fake) Publish(_ context.Context, topic string, m transport.Message) error {
	if f.OnPublish != nil {
		return f.OnPublish(topic, m)
	}
	return nil
}

// PublishAsync is Publish, its outcome reported through done.
func (f *Fake) PublishAsync(ctx context.Context, topic string, m transport.Message, done func(error)) error {
	err := f.Publish(ctx, topic, m)
	if f.Later {
		go done(err)
	} else {
		done(err)
	}
	return nil
}

// Subscribe keeps h as the handler Deliver calls, and as topic's for
// DeliverTo.
func (f *Fake) Subscribe(_ context.Context, topic, _ string, _ transport.SubscriptionType, h transport.Handler) (transport.Subscription, error) {
	f.mu.Lock()
	f.h = h
	if f.byTopic == nil {
		f.byTopic = map[string]transport.Handler{}
	}
	f.byTopic[topic] = h
	f.mu.Unlock()
	return noSub{}, nil
}

// DeliverTo hands m to the handler of the last subscription to topic, as a
// reply arriving there would; without one it is dropped.
func (f *Fake) DeliverTo(topic string, m transport.Message) {
	f.mu.Lock()
	h := f.byTopic[topic]
	f.mu.Unlock()
	if h != nil {
		h(m)
	}
}

// Deliver hands m to the last subscription's handler, as a reply arriving
// would; without one it is dropped.
func (f *Fake) Deliver(m transport.Message) {
	if h := f.Handler(); h != nil {
		h(m)
	}
}

// Handler is the last subscription's handler, nil before one.
func (f *Fake) Handler() transport.Handler {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h
}

// Close does nothing.
func (f *Fake) Close() {}

type noSub struct{}

func (noSub) Close() error { return nil }

// Hooked is the in-memory broker with Hook in front of every publish: a
// hook that returns handled=true took the message itself (dropped it, or
// failed it), with that outcome; otherwise Mem publishes it.
type Hooked struct {
	*transport.Mem
	Hook func(topic string, m transport.Message) (handled bool, err error)
}

// Publish runs Hook, then Mem's Publish.
func (h *Hooked) Publish(ctx context.Context, topic string, m transport.Message) error {
	if handled, err := h.Hook(topic, m); handled {
		return err
	}
	return h.Mem.Publish(ctx, topic, m)
}

// PublishAsync runs Hook, then Mem's PublishAsync; a hooked outcome is
// reported from another goroutine.
func (h *Hooked) PublishAsync(ctx context.Context, topic string, m transport.Message, done func(error)) error {
	if handled, err := h.Hook(topic, m); handled {
		go done(err)
		return nil
	}
	return h.Mem.PublishAsync(ctx, topic, m, done)
}
