package bridge

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// ErrServiceGone means the consumers of the request topic that could have taken
// the call went away before it was answered (the service stopped or was
// killed), so no reply will come.
var ErrServiceGone = errors.New("tool service stopped listening")

// ServiceGoneError ends a call whose service went away: it unwraps to
// ErrServiceGone.
type ServiceGoneError struct {
	Topic string // the request topic
	Why   string // what the watch saw
}

func (e *ServiceGoneError) Error() string {
	return ErrServiceGone.Error() + ": " + e.Why + " on " + e.Topic
}

// Unwrap makes errors.Is(err, ErrServiceGone) true.
func (e *ServiceGoneError) Unwrap() error { return ErrServiceGone }

// Watcher answers, asked now rather than from a cache, which consumers a
// topic has: one identity per consumer, different for a consumer that
// took another's place, and when each connected.
type Watcher interface {
	Consumers(ctx context.Context, topic string) ([]transport.Consumer, error)
}

// DefaultWatchEvery is Options.WatchEvery's default.
const DefaultWatchEvery = time.Second

// watchParallel bounds the questions the watcher asks at once.
const watchParallel = 8

// The watch: while calls are in flight, the request topics they went to
// are asked for their consumers every Options.WatchEvery (only those
// topics, only then). A request on a non-persistent topic lives in the
// consumer that took it; when that consumer is gone, so is the call. The
// broker does not say which consumer took which request, so a call is
// ended only when that is certain, or nearly:
//
//   - no consumer is left, at two questions in a row (one empty answer
//     may be a topic moving to another broker, whose consumers come back
//     within a second): every call to the topic published before the
//     second ends with ErrServiceGone;
//   - every consumer seen at the previous question is gone, though others
//     have come (a service restarted between two questions): the calls
//     published before that previous question end; later ones may have
//     reached a new consumer and wait on. Consumers are told apart by
//     name, which a client keeps when its topic moves and it connects
//     again, so a move is not a restart: the calls it holds go on;
//   - a call published after the previous question, before every
//     consumer there now connected (by the broker's clock against this
//     process's), was published when none of them was there: it went to
//     a consumer that has left, or was dropped on the way (a request
//     published while its topic moves finds no consumer).
//
// Such a call ends, unless a reply message came for it since the previous
// question: then it is suspect, and ends at the next question unless a
// reply message comes meanwhile — a stream that goes on is spared from
// then on. Calls of durable operations (CallOptions.Detached) are left to
// their own deadline. A call ended this way gets UNAVAILABLE, which a
// caller may retry.
//
// When some of several consumers (instances sharing the subscription) go
// and others stay, the calls go on: each may be on a survivor. The calls
// to a service that says which instance has them (a Go SDK service: its
// receipts and replies name it) are ended by their instance's loss
// instead, which the watch sees on the service's cancel topic
// (checkInstances, hedge.go); a call of another service on a lost
// instance ends at its deadline.
type watch struct {
	stop chan struct{}
	poke chan struct{} // a question soon: a stream's end waits for one (Call.held)
	done chan struct{}
	// seen is, per request topic watched, the consumers at the last
	// question and the epoch when it was asked.
	seen map[string]seenConsumers
	// suspect holds the calls spared at a question (the epoch asked)
	// because a reply message had come for them shortly before.
	suspect map[*Call]uint64
	// drops is, per non-persistent response topic of services that do
	// not number their replies, the last answers of the DeliveryCounter:
	// when asked, and messages the topic took in less those sent to this
	// bridge's subscription. They are kept while no call waits: the last
	// one before a call is its baseline.
	drops  map[string][]dropSample
	dropMu sync.Mutex // drops, while the questions are out
	// instances is, per request topic of a service that sends receipts,
	// what the watch saw of its instances on its cancel topic (hedge.go,
	// checkInstances); kept while no call waits.
	instances map[string]*instanceWatch
	instMu    sync.Mutex
}

type seenConsumers struct {
	names []string  // the consumers' names (transport.Consumer.Name)
	epoch uint64    // the question's epoch
	at    time.Time // when it was asked
}

func (b *Bridge) startWatch() {
	b.watch = &watch{stop: make(chan struct{}), poke: make(chan struct{}, 1), done: make(chan struct{}), seen: map[string]seenConsumers{}, suspect: map[*Call]uint64{}, drops: map[string][]dropSample{},
		instances: map[string]*instanceWatch{}}
	go b.watchLoop()
}

func (b *Bridge) stopWatch() {
	if b.watch == nil {
		return
	}
	close(b.watch.stop)
	<-b.watch.done
}

func (b *Bridge) watchLoop() {
	w := b.watch
	defer close(w.done)
	t := time.NewTicker(b.opts.WatchEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		case <-w.poke:
			// Others may come with it: one question for all of them.
			select {
			case <-w.stop:
				return
			case <-time.After(pokeDelay):
			}
		}
		b.watchOnce()
	}
}

// watchOnce asks about the request topics of the calls in flight and ends
// the calls whose consumers are gone.
func (b *Bridge) watchOnce() {
	w := b.watch
	if b.inFlight.Load() == 0 {
		clear(w.seen)
		clear(w.suspect)
		return
	}
	// The suspects of the previous question that no reply message came
	// for since end now; the others go on.
	for c, at := range w.suspect {
		c.mu.Lock()
		alive, ended := c.heard >= at, c.ended
		if alive {
			c.spared = true // it goes on: not judged by its consumers again
		}
		c.mu.Unlock()
		if !alive && !ended {
			c.finish(c.goneError(c.reqTopic, "its consumer left, and no reply came since"))
		}
		delete(w.suspect, c)
	}
	// sampled: the topics whose delivery counts are asked — the response
	// topics of services that do not number their replies, and the
	// non-persistent topics Go SDK services answer on.
	// instTopics: the request topics of services whose calls say which
	// instance has them (a receipt asked for, or a reply naming one),
	// whose cancel topics are asked which instances are there.
	topics, replyTopics, sampled := map[string]bool{}, map[string]bool{}, map[string]bool{}
	instTopics := map[string]bool{}
	b.pending.each(func(c *Call) {
		if !c.detached && (c.receipt != nil || c.instBound.Load()) {
			instTopics[c.reqTopic] = true
		}
		if b.counter != nil && (!b.numbers(c.respTopic) || c.unnumbered()) && strings.HasPrefix(c.respTopic, "non-persistent://") {
			sampled[c.respTopic] = true
		}
		topics[c.reqTopic] = true
		if t := c.replyTopic(); t != "" {
			replyTopics[t] = true
			if b.counter != nil && strings.HasPrefix(t, "non-persistent://") {
				sampled[t] = true
			}
		}
	})
	for t := range w.seen {
		if !topics[t] {
			delete(w.seen, t)
		}
	}
	// Calls published from now on are not judged by these answers.
	asked, askedAt := b.epoch.Add(1), time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.WatchEvery)
	defer cancel()
	type answer struct {
		topic string
		reply bool // a topic replies come on, asked about this bridge's own consumer
		// instancesOf: a cancel topic, asked about the instances of the
		// service on this request topic
		instancesOf string
		cs          []transport.Consumer
		err         error
	}
	answers := make(chan answer, len(topics)+len(replyTopics)+len(instTopics))
	var wg sync.WaitGroup
	sem := make(chan struct{}, watchParallel)
	ask := func(topic string, reply bool) {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cs, err := b.opts.Watch.Consumers(ctx, topic)
			answers <- answer{topic: topic, reply: reply, cs: cs, err: err}
		})
	}
	for topic := range instTopics {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ct := wire.CancelTopic(topic)
			cs, err := b.opts.Watch.Consumers(ctx, ct)
			answers <- answer{topic: ct, instancesOf: topic, cs: cs, err: err}
		})
	}
	for topic := range topics {
		ask(topic, false)
	}
	for topic := range replyTopics {
		ask(topic, true)
	}
	for topic := range sampled {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			b.sampleDelivery(ctx, topic, askedAt)
		})
	}
	wg.Wait()
	close(answers)
	b.checkHeld()
	b.checkReplyDrops(replyTopics)
	for a := range answers {
		if a.err != nil {
			b.log.Debug("cannot ask which consumers a topic has; asking again later", "topic", a.topic, "err", a.err)
			continue
		}
		if a.reply {
			b.checkOwnConsumer(a.topic, a.cs)
			continue
		}
		if a.instancesOf != "" {
			b.checkInstances(a.instancesOf, a.cs, askedAt)
			continue
		}
		names := make([]string, len(a.cs))
		for i, c := range a.cs {
			names[i] = c.Name
		}
		prev, known := w.seen[a.topic]
		w.seen[a.topic] = seenConsumers{names: names, epoch: asked, at: askedAt}
		// A reply message since the previous question (any, at the
		// first) makes a call suspect instead of ended.
		heardSince := uint64(1)
		if known {
			heardSince = prev.epoch
		}
		// Asked only when a call would end: whether an instance that
		// stopped listening still finishes its calls.
		var drainingFn func(*Call) bool
		draining := func(c *Call) bool {
			if drainingFn == nil {
				drainingFn = b.drainingSince(ctx, a.topic)
			}
			return drainingFn(c)
		}
		if len(names) == 0 {
			if known && len(prev.names) == 0 {
				b.endLost(a.topic, heardSince, asked, "no consumer is left", func(c *Call) bool {
					return c.epoch < asked && !draining(c)
				})
			}
			continue
		}
		replaced := known && len(prev.names) > 0 && !slices.ContainsFunc(prev.names, func(n string) bool { return slices.Contains(names, n) })
		first := earliest(a.cs)
		if replaced || !first.IsZero() {
			b.endLost(a.topic, heardSince, asked, "every consumer that could have taken the call has left", func(c *Call) bool {
				inGap := c.made.Before(first) && (!known || c.made.After(prev.at))
				return (replaced && c.epoch < prev.epoch || inGap) && !draining(c)
			})
		}
	}
}

// drainingSince asks who listens on the cancel topic of requestTopic
// (wire.CancelTopic): a Go SDK instance that stopped taking requests keeps
// its subscription there while it finishes the calls it has. The function
// it returns says whether such an instance, there already when call c was
// made, still runs — c may be one of those it finishes. Without an answer,
// or without such instances (TrustGraph's Python services have none), it
// says no.
func (b *Bridge) drainingSince(ctx context.Context, requestTopic string) func(*Call) bool {
	cs, err := b.opts.Watch.Consumers(ctx, wire.CancelTopic(requestTopic))
	if err != nil || len(cs) == 0 {
		return func(*Call) bool { return false }
	}
	first := earliest(cs)
	if first.IsZero() {
		return func(*Call) bool { return true } // instances there, since when unknown: spare
	}
	return func(c *Call) bool { return !c.made.Before(first) }
}

// endLost ends the calls to topic that lost says are lost, except those a
// reply message came for since epoch heardSince, which become suspects of
// question asked.
func (b *Bridge) endLost(topic string, heardSince, asked uint64, why string, lost func(*Call) bool) {
	w, n := b.watch, 0
	b.pending.each(func(c *Call) {
		if c.reqTopic != topic || !lost(c) {
			return
		}
		c.mu.Lock()
		heard, done := c.heard, c.ended || c.spared || c.detached
		c.mu.Unlock()
		switch {
		case done:
		case heard >= heardSince:
			if _, ok := w.suspect[c]; !ok {
				w.suspect[c] = asked
			}
		default:
			c.finish(c.goneError(topic, why))
			n++
		}
	})
	if n > 0 {
		b.log.Warn("calls ended: their tool service's consumers left or reconnected", "request_topic", topic, "calls", n, "why", why)
	}
}

// earliest is the first time one of cs connected; zero when one's is
// unknown.
func earliest(cs []transport.Consumer) time.Time {
	var first time.Time
	for _, c := range cs {
		if c.Since.IsZero() {
			return time.Time{}
		}
		if first.IsZero() || c.Since.Before(first) {
			first = c.Since
		}
	}
	return first
}

// maxResends is how many times a call asks its service for its last reply
// again, at one question each: the first request may itself be lost, the
// service's cancel topic moving too.
const maxResends = 3

// checkOwnConsumer looks at this bridge's consumer among cs, the consumers
// of topic, a topic replies come on. When it connected after a call was
// made (the topic moved to another broker), a reply published meanwhile
// was dropped: each call made before, still waiting and whose replies
// come there, asks its service for its last reply again
// (wire.CreditResend, on the service's cancel topic), at up to maxResends
// questions. A Go SDK
// instance that answered it sends it again; a call whose service is still
// at work is answered as usual; services that ignore the request
// (TrustGraph's Python ones) leave the call to its deadline, as before.
func (b *Bridge) checkOwnConsumer(topic string, cs []transport.Consumer) {
	prefix := b.subID + "/"
	var since time.Time
	for _, c := range cs {
		if strings.HasPrefix(c.ID, prefix) {
			since = c.Since
			break
		}
	}
	if since.IsZero() { // not (yet) back, or its time unknown
		return
	}
	n := 0
	b.pending.each(func(c *Call) {
		if c.replyTopic() != topic || !c.made.Before(since) {
			return
		}
		c.mu.Lock()
		skip := c.ended || c.detached || c.resends >= maxResends
		if !skip {
			c.resends++
		}
		c.mu.Unlock()
		if skip {
			return
		}
		b.sendResend(c.reqTopic, c.id)
		n++
	})
	if n > 0 {
		b.log.Info("this gateway's consumer of a reply topic connected again; the services of calls waiting on it were asked to send their replies again",
			"topic", topic, "calls", n, "connected", since)
	}
}

// dropSample is one answer of the DeliveryCounter about a topic.
type dropSample struct {
	at     time.Time
	excess int64  // messages in less messages sent to this bridge
	life   string // the subscription's lifetime (transport.Delivery.Lifetime)
}

// sampleDelivery asks the DeliveryCounter about topic and keeps the
// answer, as of at; one without a lifetime (no consumer of this bridge's
// there just then) is not kept: it compares with nothing.
func (b *Bridge) sampleDelivery(ctx context.Context, topic string, at time.Time) {
	d, err := b.counter.Delivery(ctx, topic, b.subID)
	if err != nil {
		b.log.Debug("cannot ask how many messages the broker sent this gateway", "topic", topic, "err", err)
		return
	}
	if d.Lifetime == "" {
		return
	}
	w := b.watch
	w.dropMu.Lock()
	defer w.dropMu.Unlock()
	w.drops[topic] = append(w.drops[topic], dropSample{at: at, excess: d.In - d.Out, life: d.Lifetime})
	if n := len(w.drops[topic]); n > maxDropSamples {
		w.drops[topic] = w.drops[topic][n-maxDropSamples:]
	}
}

// sampleNew takes the first sample of a subscription just made to a
// non-persistent response topic, before any call waits on it: the
// baseline of the calls made next. The samples of an earlier lifetime
// (a subscription released and made again) do not compare with it.
func (b *Bridge) sampleNew(ctx context.Context, topic string) {
	if b.counter == nil || b.watch == nil || !strings.HasPrefix(topic, "non-persistent://") {
		return
	}
	at := time.Now()
	ctx, cancel := context.WithTimeout(ctx, b.opts.WatchEvery)
	defer cancel()
	b.sampleDelivery(ctx, topic, at)
}

// pokeDelay gathers the reasons for an early question (Call.held).
const pokeDelay = 20 * time.Millisecond

// maxDropSamples is how many answers per topic the watch keeps.
const maxDropSamples = 16

// heldFor is how long a held last message waits for the watch's word at
// most; past it, it is passed on (the admin API does not answer).
const heldFor = 5 * time.Second

// checkHeld looks at the calls to services that do not number their
// replies, on the topics sampled (drops). Against the topic's last answer
// from before a call was made (or its first after), an excess that rose
// and stayed up at the next answer (messages in flight when asked are
// caught up with; dropped ones never are) means the broker dropped
// messages for this bridge on the topic while the call ran: any of them
// may have been its own, so it ends with a DroppedError (UNAVAILABLE
// REPLY_LOST) — a hole, or a lost last message that would leave it
// waiting to its deadline. A held last message (Call.held) is passed on
// once an answer after it shows no rise: the stream is whole.
func (b *Bridge) checkHeld() {
	w := b.watch
	w.dropMu.Lock() // a new subscription's first sample may come meanwhile
	defer w.dropMu.Unlock()
	if len(w.drops) == 0 {
		return
	}
	b.pending.each(func(c *Call) {
		samples := w.drops[c.respTopic]
		if len(samples) == 0 {
			return
		}
		if c.bound.Load() && c.numbered {
			return // a hole shows by itself (checkReplyDrops for the end)
		}
		c.mu.Lock()
		held, heldAt, ended := c.held != nil, c.heldAt, c.ended
		c.mu.Unlock()
		if ended {
			return
		}
		base := baseSample(samples, c.made)
		if base < 0 {
			return
		}
		if dropped, _ := droppedSince(samples, base); dropped > 0 {
			c.end(&DroppedError{Topic: c.respTopic, Dropped: dropped}, false)
			return
		}
		if !held {
			return
		}
		for _, s := range samples[base:] {
			if s.at.After(heldAt) && s.excess <= samples[base].excess {
				c.release()
				return
			}
		}
		if time.Since(heldAt) > heldFor {
			b.log.Warn("cannot tell whether the broker dropped reply messages of an unnumbered stream; passing its end on", "topic", c.respTopic, "id", c.id)
			c.release()
		}
	})
}

// baseSample is the index of the sample a call made at made compares
// the later ones with: the last one before it, else the first after (-1:
// none). Counts compare within one lifetime of the subscription only:
// when a later one began (this bridge's consumer connected again), its
// first sample is the baseline. What was dropped between the two cannot
// be known, and is not guessed at.
func baseSample(samples []dropSample, made time.Time) int {
	base := -1
	for i, s := range samples {
		if s.at.Before(made) {
			base = i
		} else if base < 0 {
			base = i
			break
		}
	}
	if base < 0 {
		return -1
	}
	for i := len(samples) - 1; i > base; i-- {
		if samples[i].life != samples[i-1].life {
			return i
		}
	}
	return base
}

// droppedSince says how many messages the samples after base show
// dropped: a rise over the baseline that stayed up at the next answer
// (messages in flight when asked are caught up with; dropped ones never
// are), counted at that next answer; and the excess then (0, 0: none).
func droppedSince(samples []dropSample, base int) (dropped, excess int64) {
	for i := base + 1; i+1 < len(samples); i++ {
		if samples[i].excess > samples[base].excess && samples[i+1].excess >= samples[i].excess {
			return samples[i+1].excess - samples[base].excess, samples[i+1].excess
		}
	}
	return 0, 0
}

// checkReplyDrops looks at the delivery counts of the topics Go SDK
// services answer this bridge's calls on (replyTopics, sampled). Their
// replies are numbered, so a message dropped in the middle of a reply
// shows at the next one (LostRepliesError); a last message dropped would
// not, and its call would wait to its deadline. So when the counts show
// messages dropped for this bridge there since a call was made, the call
// asks its service for its last reply again (wire.CreditResend), once
// per drop seen and at most maxResends times: a service that sent it
// sends it again, one still at work answers as usual.
func (b *Bridge) checkReplyDrops(replyTopics map[string]bool) {
	w := b.watch
	w.dropMu.Lock()
	defer w.dropMu.Unlock()
	n := 0
	b.pending.each(func(c *Call) {
		topic := c.replyTopic()
		if !replyTopics[topic] {
			return
		}
		samples := w.drops[topic]
		base := baseSample(samples, c.made)
		if base < 0 {
			return
		}
		dropped, excess := droppedSince(samples, base)
		if dropped == 0 {
			return
		}
		c.mu.Lock()
		skip := c.ended || c.detached || c.resends >= maxResends || excess <= c.dropSeen
		if !skip {
			c.resends++
			c.dropSeen = excess
		}
		c.mu.Unlock()
		if !skip {
			b.sendResend(c.reqTopic, c.id)
			n++
		}
	})
	if n > 0 {
		b.log.Warn("the broker dropped replies meant for this gateway; the services of the calls waiting were asked to send their last replies again", "calls", n)
	}
}
