package bridge

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
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
// took another's place.
type Watcher interface {
	Consumers(ctx context.Context, topic string) ([]string, error)
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
//     have come (a service restarted between two questions): the calls
//     published before that previous question end; later ones may have
//     reached a new consumer and wait on.
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
}

type seenConsumers struct {
	ids   []string
	epoch uint64
}

func (b *Bridge) startWatch() {
	b.watch = &watch{stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]seenConsumers{}}
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
		return
	}
	topics := map[string]bool{}
	b.pending.each(func(c *Call) { topics[c.reqTopic] = true })
	for t := range w.seen {
		if !topics[t] {
			delete(w.seen, t)
		}
	}
	// Calls published from now on are not judged by these answers.
	asked := b.epoch.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.WatchEvery)
	defer cancel()
	type answer struct {
		topic string
		ids   []string
		err   error
	}
	answers := make(chan answer, len(topics))
	var wg sync.WaitGroup
	sem := make(chan struct{}, watchParallel)
	for topic := range topics {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ids, err := b.opts.Watch.Consumers(ctx, topic)
			answers <- answer{topic, ids, err}
		})
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.err != nil {
			b.log.Debug("cannot ask which consumers the request topic has; asking again later", "topic", a.topic, "err", a.err)
			continue
		}
		prev, known := w.seen[a.topic]
		w.seen[a.topic] = seenConsumers{ids: a.ids, epoch: asked}
		switch {
		case len(a.ids) == 0:
			b.endGone(a.topic, asked, "no consumer is left")
		case known && len(prev.ids) > 0 && !slices.ContainsFunc(prev.ids, func(id string) bool { return slices.Contains(a.ids, id) }):
			b.endGone(a.topic, prev.epoch, "every consumer was replaced since the call was made")
		}
	}
}

// endGone ends the calls to topic published before epoch.
func (b *Bridge) endGone(topic string, epoch uint64, why string) {
	n := 0
	b.pending.each(func(c *Call) {
		if c.reqTopic == topic && c.epoch < epoch {
			c.finish(&ServiceGoneError{Topic: topic, Why: why})
			n++
		}
	})
	if n > 0 {
		b.log.Warn("calls ended: their tool service stopped listening", "request_topic", topic, "calls", n, "why", why)
	}
}
