package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

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

// ConsumerSource answers whether topics have consumers from a broker's
// admin interface: Subscribed from a cache it keeps, Consumers asked now,
// its answer refreshing the cache (pulsarbroker.AdminPresence).
type ConsumerSource interface {
	Subscribed(ctx context.Context, topic string) (bool, error)
	Consumers(ctx context.Context, topic string) ([]Consumer, error)
}

// Defaults of a Presence.
const (
	// DefaultRecheckWithin bounds how long a call waits for a topic's
	// consumers to be asked again before its cached "none" stands.
	DefaultRecheckWithin = 500 * time.Millisecond
	// askTimeout bounds one question to the admin interface.
	askTimeout = 2 * time.Second
	// learnAtOnce bounds the questions Learn asks at once.
	learnAtOnce = 8
)

// Presence tells the bridge whether a request topic has consumers
// (bridge.Presence) from a ConsumerSource's cache, but never refuses a
// call on a cached "none": that answer may be older than the consumer of
// a service that has just started, so the topic is asked about again now,
// and the call is refused only when that question too finds none. A call
// made once a consumer is subscribed is therefore served, whatever the
// cache held. The questions about one topic are shared: one at a time,
// each answering every call that came before it started, so a flood of
// calls to a topic nobody consumes asks the admin interface one question
// at a time. A call waits at most its bound (DefaultRecheckWithin) for
// its answer; a question that fails or is not answered in time lets the
// call go ahead, as when the admin interface cannot answer at all.
type Presence struct {
	src    ConsumerSource
	within time.Duration

	mu     sync.Mutex
	topics map[string]*recheck // topics being asked about again
	joined int                 // calls given a question to wait for, ever
}

// recheck is the questions about one topic: the one under way, and the
// next, which starts when it ends and answers the calls that came
// meanwhile.
type recheck struct {
	running, next *round
}

// round is one question and, once done is closed, its answer.
type round struct {
	done    chan struct{}
	present bool
	err     error
}

// NewPresence returns a Presence over src; within bounds a call's wait
// for a topic to be asked again (zero or less: DefaultRecheckWithin).
func NewPresence(src ConsumerSource, within time.Duration) *Presence {
	if within <= 0 {
		within = DefaultRecheckWithin
	}
	return &Presence{src: src, within: within, topics: map[string]*recheck{}}
}

// Subscribed reports whether topic has a consumer: the source's cached
// answer when it is yes, else the answer of a question asked after this
// call was made. When it cannot tell it returns true with the error.
func (p *Presence) Subscribed(ctx context.Context, topic string) (bool, error) {
	ok, err := p.src.Subscribed(ctx, topic)
	if ok || err != nil {
		return true, err
	}
	r := p.ask(topic)
	t := time.NewTimer(p.within)
	defer t.Stop()
	select {
	case <-r.done:
		return r.present, r.err
	case <-t.C:
		return true, fmt.Errorf("the consumers of %s were not told within %v", topic, p.within)
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// ask returns a question about topic that starts now or after the one
// under way.
func (p *Presence) ask(topic string) *round {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.joined++
	rc := p.topics[topic]
	if rc == nil {
		rc = &recheck{}
		p.topics[topic] = rc
	}
	if rc.running != nil {
		if rc.next == nil {
			rc.next = &round{done: make(chan struct{})}
		}
		return rc.next
	}
	r := &round{done: make(chan struct{})}
	rc.running = r
	go p.run(topic, rc, r)
	return r
}

// run asks r's question, then each next one, until none is waiting.
func (p *Presence) run(topic string, rc *recheck, r *round) {
	for r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
		cs, err := p.src.Consumers(ctx, topic)
		cancel()
		r.present, r.err = len(cs) > 0 || err != nil, err
		close(r.done)
		p.mu.Lock()
		r, rc.running, rc.next = rc.next, rc.next, nil
		if r == nil {
			delete(p.topics, topic)
		}
		p.mu.Unlock()
	}
}

// Learn asks the source about each of topics now, a few at once, so that
// calls find their answers cached, and returns once every one has been
// answered or has failed, with the failures.
func (p *Presence) Learn(ctx context.Context, topics []string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	slots := make(chan struct{}, learnAtOnce)
	for _, topic := range topics {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return errors.Join(append(errs, ctx.Err())...)
		}
		wg.Go(func() {
			defer func() { <-slots }()
			qctx, cancel := context.WithTimeout(ctx, askTimeout)
			defer cancel()
			if _, err := p.src.Consumers(qctx, topic); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", topic, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
