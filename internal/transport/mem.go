package transport

import (
	"context"
	"fmt"
	"sync"
)

// Mem is an in-memory Broker with non-persistent topic semantics: a message
// published while no subscription exists is dropped, an exclusive
// subscription gets every message, consumers of a shared subscription take
// turns, and a consumer whose queue is full loses the message. It exists for
// unit tests; the same contract tests also run against Pulsar.
type Mem struct {
	mu     sync.Mutex
	topics map[string]map[string]*memSub // topic → subscription name → sub
	closed bool
	// QueueSize is each consumer's receive queue (default 1000).
	QueueSize int
}

// NewMem returns an empty in-memory broker.
func NewMem() *Mem { return &Mem{topics: map[string]map[string]*memSub{}, QueueSize: 1000} }

type memSub struct {
	typ       SubscriptionType
	consumers []*memConsumer
	next      int
}

type memConsumer struct {
	ch   chan Message
	done chan struct{}
	once sync.Once
	m    *Mem
	top  string
	name string
}

// Publish implements Broker.
func (m *Mem) Publish(ctx context.Context, topic string, msg Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, s := range m.topics[topic] {
		if len(s.consumers) == 0 {
			continue
		}
		c := s.consumers[s.next%len(s.consumers)]
		s.next++
		cp := Message{Payload: append([]byte(nil), msg.Payload...), Properties: make(map[string]string, len(msg.Properties)), Key: msg.Key}
		for k, v := range msg.Properties {
			cp.Properties[k] = v
		}
		select {
		case c.ch <- cp:
		default: // full queue: dropped, as a non-persistent topic does
		}
	}
	return nil
}

// PublishAsync implements Broker: done is called before it returns (the
// in-memory broker never waits).
func (m *Mem) PublishAsync(ctx context.Context, topic string, msg Message, done func(error)) error {
	if err := m.Publish(ctx, topic, msg); err != nil {
		return err
	}
	done(nil)
	return nil
}

// Subscribe implements Broker.
func (m *Mem) Subscribe(ctx context.Context, topic, subscription string, typ SubscriptionType, h Handler) (Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	subs := m.topics[topic]
	if subs == nil {
		subs = map[string]*memSub{}
		m.topics[topic] = subs
	}
	if typ == Transient {
		typ = Exclusive // nothing here outlives its consumer anyway
	}
	s := subs[subscription]
	if s == nil {
		s = &memSub{typ: typ}
		subs[subscription] = s
	}
	if s.typ != typ || (typ == Exclusive && len(s.consumers) > 0) {
		return nil, fmt.Errorf("%w: subscription %q on %s is busy", ErrUnavailable, subscription, topic)
	}
	c := &memConsumer{ch: make(chan Message, m.QueueSize), done: make(chan struct{}), m: m, top: topic, name: subscription}
	s.consumers = append(s.consumers, c)
	go func() {
		defer close(c.done)
		for msg := range c.ch {
			h(msg)
		}
	}()
	return c, nil
}

// Close implements Subscription.
func (c *memConsumer) Close() error {
	c.once.Do(func() {
		c.m.mu.Lock()
		if s := c.m.topics[c.top][c.name]; s != nil {
			for i, x := range s.consumers {
				if x == c {
					s.consumers = append(s.consumers[:i], s.consumers[i+1:]...)
					break
				}
			}
			if len(s.consumers) == 0 {
				delete(c.m.topics[c.top], c.name)
			}
		}
		close(c.ch)
		c.m.mu.Unlock()
	})
	<-c.done
	return nil
}

// Subscribers reports how many consumers are attached to topic.
func (m *Mem) Subscribers(topic string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.topics[topic] {
		n += len(s.consumers)
	}
	return n
}

// Close implements Broker. Open subscriptions keep their goroutines until
// they are closed themselves.
func (m *Mem) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}
