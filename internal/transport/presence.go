package transport

import "time"

// What a broker's admin interface reports of a topic's consumers and
// deliveries (pulsarbroker.AdminPresence answers them from Pulsar's admin
// API; the bridge's watch of calls in flight reads them).

// Consumer is one consumer of a topic, as the admin API describes it.
type Consumer struct {
	// ID is the consumer's subscription, name, address and the time it
	// connected: a consumer that went away and one that took its place
	// (a restart, or its topic moved to another broker) differ.
	ID string
	// Name is its subscription and name, which a client keeps when it
	// connects again (its topic moved) and a restarted process does not.
	Name string
	// Since is when it connected, by the broker's clock; zero when the
	// broker did not say or said it in an unknown form.
	Since time.Time
}

// Delivery is what the broker counted of a topic and one subscription of
// it, as Delivery read it.
type Delivery struct {
	// In is the messages the topic has taken in (its msgInCounter), Out
	// those the broker sent to the subscription (its msgOutCounter).
	In, Out int64
	// Lifetime tells the subscription's lives apart: its consumers, each
	// with the time it connected. A subscription on a non-persistent
	// topic goes with its last consumer and starts counting afresh when
	// made again, and a topic made again (moved to another broker, or
	// deleted while unused) counts afresh too, with new consumers: counts
	// of different lifetimes do not compare. "" when it has no consumer.
	Lifetime string
}
