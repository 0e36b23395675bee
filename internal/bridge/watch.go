package bridge

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
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
// consumer that took it; when that consumer is gone, so is the call.
// The broker does not say which consumer took which request, so a call
// is ended only when that is certain:
//
//   - no consumer is left: every call to the topic published before the
//     question was asked ends with ErrServiceGone;
//   - every consumer seen at the previous question is gone, though others
//     have come (a service restarted between two questions, or its
//     request topic moved to another broker, which reconnects every
//     consumer): the calls published before that previous question are
//     lost or on a consumer that has left;
//   - every consumer there is connected after a call was made (by the
//     broker's clock against this process's): the call was published when
//     none of them was there, so the consumer that took it has gone, or
//     the broker dropped it on the way (a request published while its
//     topic moves finds no consumer).
//
// Such a call ends, unless a reply message came for it since the previous
// question: then it is suspect, and ends at the next question unless a
// reply message comes meanwhile (a stream whose service reconnected goes
// on). A call ended this way gets UNAVAILABLE, which a caller may retry.
//
// When some of several consumers (instances sharing the subscription) go
// and others stay, the calls go on: each may be on a survivor, and one on
// a lost instance ends at its deadline.
type watch struct {
	stop chan struct{}
	done chan struct{}
	// seen is, per request topic watched, the consumers at the last
	// question and the epoch when it was asked.
	seen map[string]seenConsumers
	// suspect holds the calls spared at a question (the epoch asked)
	// because a reply message had come for them shortly before.
	suspect map[*Call]uint64
	// ours is, per topic replies come on, when this bridge's consumer
	// there connected, at the last question.
	ours map[string]time.Time
}

type seenConsumers struct {
	ids   []string
	epoch uint64
}

func (b *Bridge) startWatch() {
	b.watch = &watch{stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]seenConsumers{}, suspect: map[*Call]uint64{}, ours: map[string]time.Time{}}
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
		clear(w.ours)
		return
	}
	// The suspects of the previous question that no reply message came
	// for since end now; the others go on.
	for c, at := range w.suspect {
		c.mu.Lock()
		alive, ended := c.heard >= at, c.ended
		c.mu.Unlock()
		if !alive && !ended {
			c.finish(&ServiceGoneError{Topic: c.reqTopic, Why: "its consumer left or reconnected, and no reply came since"})
		}
		delete(w.suspect, c)
	}
	topics, replyTopics := map[string]bool{}, map[string]bool{}
	b.pending.each(func(c *Call) {
		topics[c.reqTopic] = true
		if t := c.replyTopic(); t != "" {
			replyTopics[t] = true
		}
	})
	for t := range w.seen {
		if !topics[t] {
			delete(w.seen, t)
		}
	}
	for t := range w.ours {
		if !replyTopics[t] {
			delete(w.ours, t)
		}
	}
	// Calls published from now on are not judged by these answers.
	asked := b.epoch.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.WatchEvery)
	defer cancel()
	type answer struct {
		topic string
		reply bool // a topic replies come on, asked about this bridge's own consumer
		cs    []transport.Consumer
		err   error
	}
	answers := make(chan answer, len(topics)+len(replyTopics))
	var wg sync.WaitGroup
	sem := make(chan struct{}, watchParallel)
	ask := func(topic string, reply bool) {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cs, err := b.opts.Watch.Consumers(ctx, topic)
			answers <- answer{topic, reply, cs, err}
		})
	}
	for topic := range topics {
		ask(topic, false)
	}
	for topic := range replyTopics {
		ask(topic, true)
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.err != nil {
			b.log.Debug("cannot ask which consumers a topic has; asking again later", "topic", a.topic, "err", a.err)
			continue
		}
		if a.reply {
			b.checkOwnConsumer(a.topic, a.cs)
			continue
		}
		ids := make([]string, len(a.cs))
		for i, c := range a.cs {
			ids[i] = c.ID
		}
		prev, known := w.seen[a.topic]
		w.seen[a.topic] = seenConsumers{ids: ids, epoch: asked}
		// A reply message since the previous question (any, at the
		// first) makes a call suspect instead of ended.
		heardSince := uint64(1)
		if known {
			heardSince = prev.epoch
		}
		if len(ids) == 0 {
			b.endLost(a.topic, heardSince, asked, "no consumer is left", func(c *Call) bool { return c.epoch < asked })
			continue
		}
		replaced := known && len(prev.ids) > 0 && !slices.ContainsFunc(prev.ids, func(id string) bool { return slices.Contains(ids, id) })
		first := earliest(a.cs)
		if replaced || !first.IsZero() {
			b.endLost(a.topic, heardSince, asked, "every consumer that could have taken the call has left or reconnected", func(c *Call) bool {
				return replaced && c.epoch < prev.epoch || c.made.Before(first)
			})
		}
	}
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
		heard, ended := c.heard, c.ended
		c.mu.Unlock()
		switch {
		case ended:
		case heard >= heardSince:
			if _, ok := w.suspect[c]; !ok {
				w.suspect[c] = asked
			}
		default:
			c.finish(&ServiceGoneError{Topic: topic, Why: why})
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

// checkOwnConsumer looks at this bridge's consumer among cs, the consumers
// of topic, a topic replies come on. When it connected again since the
// previous question (the topic moved to another broker), a reply
// published meanwhile was dropped: each call made before, still waiting
// and whose replies come there, asks its service for its last reply once
// more (wire.CreditResend, on the service's cancel topic). A Go SDK
// instance that answered it sends it again; a call whose service is still
// at work is answered as usual; services that ignore the request
// (TrustGraph's Python ones) leave the call to its deadline, as before.
func (b *Bridge) checkOwnConsumer(topic string, cs []transport.Consumer) {
	w := b.watch
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
	prev, known := w.ours[topic]
	w.ours[topic] = since
	if !known || !since.After(prev) {
		return
	}
	n := 0
	b.pending.each(func(c *Call) {
		if c.replyTopic() != topic || !c.made.Before(since) {
			return
		}
		c.mu.Lock()
		skip := c.ended || c.resent
		c.resent = true
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
