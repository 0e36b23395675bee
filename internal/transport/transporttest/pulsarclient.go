package transporttest

import (
	"context"
	"errors"
	"sync"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/transport"
)

// PulsarClient is a pulsar.Client whose producers publish to b and whose
// consumers subscribe to b: with the in-memory broker, a tool service
// runs without Pulsar through the SDK's public option,
// toolservice.WithPulsarClient(transporttest.PulsarClient(mem)). It does
// what the Pulsar transport asks of a client (producers that send and
// flush, consumers that receive and ack); any other call panics. Close
// leaves b open: it belongs to the test.
func PulsarClient(b transport.Broker) pulsar.Client { return &pulsarClient{b: b} }

type pulsarClient struct {
	pulsar.Client // the calls the transport does not make: nil, they panic
	b             transport.Broker
}

func (c *pulsarClient) CreateProducer(o pulsar.ProducerOptions) (pulsar.Producer, error) {
	if o.Topic == "" {
		return nil, errors.New("transporttest: producer without a topic")
	}
	return &producer{b: c.b, topic: o.Topic}, nil
}

func (c *pulsarClient) Subscribe(o pulsar.ConsumerOptions) (pulsar.Consumer, error) {
	typ := transport.Exclusive
	if o.Type == pulsar.Shared {
		typ = transport.Shared
	}
	cs := &consumer{msgs: make(chan pulsar.Message), closed: make(chan struct{})}
	sub, err := c.b.Subscribe(context.Background(), o.Topic, o.SubscriptionName, typ, func(m transport.Message) {
		select {
		case cs.msgs <- message{m: m, topic: o.Topic}:
		case <-cs.closed:
		}
	})
	if err != nil {
		return nil, err
	}
	cs.sub = sub
	return cs, nil
}

func (c *pulsarClient) Close() {}

type producer struct {
	pulsar.Producer
	b     transport.Broker
	topic string
}

func (p *producer) Topic() string { return p.topic }

func (p *producer) SendAsync(ctx context.Context, m *pulsar.ProducerMessage, done func(pulsar.MessageID, *pulsar.ProducerMessage, error)) {
	msg := transport.Message{Payload: m.Payload, Properties: m.Properties, Key: m.Key}
	if err := p.b.PublishAsync(ctx, p.topic, msg, func(err error) { done(nil, m, err) }); err != nil {
		done(nil, m, err)
	}
}

func (p *producer) Flush() error { return nil }

func (p *producer) FlushWithCtx(context.Context) error { return nil }

func (p *producer) Close() {}

type consumer struct {
	pulsar.Consumer
	sub    transport.Subscription
	msgs   chan pulsar.Message
	closed chan struct{}
	once   sync.Once
}

var errConsumerClosed = errors.New("transporttest: consumer closed")

func (c *consumer) Receive(ctx context.Context) (pulsar.Message, error) {
	select {
	case m := <-c.msgs:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, errConsumerClosed
	}
}

func (c *consumer) Ack(pulsar.Message) error { return nil }

// Chan holds what the consumer received and has not handed out, as the
// client's does after Close.
func (c *consumer) Chan() <-chan pulsar.ConsumerMessage {
	ch := make(chan pulsar.ConsumerMessage, len(c.msgs))
	for len(ch) < cap(ch) {
		select {
		case m := <-c.msgs:
			ch <- pulsar.ConsumerMessage{Consumer: c, Message: m}
		default:
			return ch
		}
	}
	return ch
}

func (c *consumer) Close() {
	c.once.Do(func() {
		close(c.closed)
		_ = c.sub.Close()
	})
}

type message struct {
	pulsar.Message
	m     transport.Message
	topic string
}

func (m message) Payload() []byte               { return m.m.Payload }
func (m message) Properties() map[string]string { return m.m.Properties }
func (m message) Key() string                   { return m.m.Key }
func (m message) Topic() string                 { return m.topic }
