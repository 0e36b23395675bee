// Package transport moves raw messages between topics: publish a payload
// with properties, subscribe a handler. It hides the message broker behind a
// small interface so that the bridge and the tool-service SDK carry no broker
// details. Two implementations exist: Apache Pulsar (package pulsarbroker,
// the product) and an in-memory broker with the same non-persistent
// semantics (Mem, for unit tests). This package links no broker client.
package transport

import (
	"context"
	"errors"
	"time"
)

// DefaultPulsarURL is the broker a program connects to unless told
// otherwise: a standalone Pulsar on this host.
const DefaultPulsarURL = "pulsar://127.0.0.1:6650"

// Connection is where the broker is and how a client proves who it is:
// the settings every Pulsar client of one process shares, whatever it is
// for.
type Connection struct {
	// URL of the broker, e.g. pulsar://127.0.0.1:6650 or pulsar+ssl://….
	URL string
	// TokenFile holds an authentication token (a JWT the broker's token
	// authentication accepts), read again on every connection; "" = none.
	TokenFile string
	// TLSTrustCertsFile is a PEM CA bundle trusted for pulsar+ssl:// URLs.
	TLSTrustCertsFile string
}

// Message is one message on a topic.
type Message struct {
	Payload    []byte
	Properties map[string]string
	// Key is the message key (Pulsar's partition/compaction key); "" = none.
	Key string
	// Deadline, when set, bounds the publish as a context deadline would,
	// without the context and timer one costs: a message not yet handed
	// to the client then is given up (context.DeadlineExceeded), and an
	// inline publisher waits for the broker's receipt no longer.
	Deadline time.Time
	// Redeliveries counts a received message's earlier deliveries (on a
	// persistent topic: ones not acknowledged).
	Redeliveries uint32
	// PublishTime is when its producer published a message read from a
	// table (Follow, ReadSince, ReadRange) or received on a persistent
	// topic (ConsumeAsync), by the producer's clock.
	PublishTime time.Time
}

// SubscriptionType says how a subscription's consumers share messages.
type SubscriptionType int

const (
	// Exclusive means one consumer receives every message of the topic.
	Exclusive SubscriptionType = iota
	// Shared means consumers with the same subscription name take turns.
	Shared
	// KeyShared is Shared where every message of one key goes to one
	// consumer, in order (Pulsar's Key_Shared; the in-memory broker treats
	// it as Shared).
	KeyShared
	// Transient is Exclusive for a listener that wants the messages sent
	// while it listens and nothing else: on a persistent topic the broker
	// forgets the subscription, and keeps no backlog for it, once its
	// consumer is gone (a non-durable subscription); on a non-persistent
	// topic it is Exclusive.
	Transient
)

// Handler receives the messages of a subscription, one at a time, in the
// order they arrive. It must not block for long: on a non-persistent topic
// the broker drops what a slow consumer cannot take.
type Handler func(Message)

// Subscription is an attached consumer. Close detaches it and waits until
// its handler has returned for the last time.
type Subscription interface {
	Close() error
}

// Broker publishes and subscribes.
type Broker interface {
	// Publish sends msg to topic and returns once the broker accepted it,
	// or ctx ends.
	Publish(ctx context.Context, topic string, msg Message) error
	// PublishAsync hands msg over for topic without waiting for the
	// broker. When it returns an error the message was not taken and done
	// is never called; otherwise done is called exactly once with the
	// outcome (possibly before PublishAsync returns) and must not block.
	PublishAsync(ctx context.Context, topic string, msg Message, done func(error)) error
	// Subscribe attaches a consumer to topic under the subscription name.
	// When it returns without error the subscription exists on the broker,
	// so messages published afterwards reach h.
	Subscribe(ctx context.Context, topic, subscription string, typ SubscriptionType, h Handler) (Subscription, error)
	// Close releases every producer and consumer.
	Close()
}

// InlinePublisher is a Broker that can send a message on the calling
// goroutine. PublishInline has PublishAsync's contract, except that it may
// wait for the broker's receipt while ctx lasts (done has then normally
// been called when it returns). For a caller that waits for a reply
// afterwards anyway, it saves handing the message to another goroutine
// when nothing else is being sent. A caller that publishes many messages
// in a row (a stream's chunks) wants PublishAsync, which batches them.
type InlinePublisher interface {
	PublishInline(ctx context.Context, topic string, msg Message, done func(error)) error
}

// Sentinel errors a Broker wraps so callers can tell failures apart.
var (
	// ErrUnavailable: the broker cannot be reached or refused the operation.
	ErrUnavailable = errors.New("message broker unavailable")
	// ErrQueueFull: the producer's local queue is full (overload).
	ErrQueueFull = errors.New("publish queue full")
	// ErrClosed: the broker client was closed.
	ErrClosed = errors.New("broker client closed")
	// ErrDropped: the broker acknowledged the message but dropped it
	// (too many non-persistent messages in hand on the connection); no
	// consumer got it, so it may be sent again.
	ErrDropped = errors.New("message dropped by the broker")
)
