package bridge

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"
)

// Response topics the bridge keeps subscribed. Track says which ones are
// wanted (those of the registry's services): new ones are subscribed in
// the background, and the subscriptions of topics no longer wanted are
// closed once no call waits on them, so a withdrawn service leaves nothing
// behind. A topic that cannot be subscribed (a tenant that does not exist)
// is retried in the background with a capped backoff and listed by
// Failing; it holds up neither the others nor readiness.

// listenParallel bounds the subscriptions made at once.
const listenParallel = 8

// Backoff of the background retries of topics that cannot be subscribed.
const (
	retryFirst = time.Second
	retryMax   = 30 * time.Second
)

type tracker struct {
	once sync.Once
	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	// mu is taken before the bridge's own lock when both are held.
	mu sync.Mutex
	// wanted is the topics Track named last (nil before its first call:
	// then nothing is released).
	wanted map[string]bool
	// todo holds topics wanted and not subscribed, with the last error
	// ("" when not tried yet).
	todo map[string]string
}

// TopicFailure is a response topic that cannot be subscribed.
type TopicFailure struct {
	Topic string `json:"topic"`
	Error string `json:"error"`
}

// Track declares the response topics wanted now (the reply topic is always
// wanted). It returns at once: new topics are subscribed in the
// background, and subscriptions of topics not named are closed once no
// call waits for a reply on them.
func (b *Bridge) Track(topics []string) {
	t := &b.track
	t.mu.Lock()
	t.wanted = make(map[string]bool, len(topics)+1)
	for _, topic := range topics {
		t.wanted[topic] = true
	}
	if b.opts.ReplyTopic != "" {
		t.wanted[b.opts.ReplyTopic] = true
	}
	if t.todo == nil {
		t.todo = map[string]string{}
	}
	for topic := range t.todo {
		if !t.wanted[topic] {
			delete(t.todo, topic)
		}
	}
	b.mu.RLock()
	for topic := range t.wanted {
		if _, ok := b.topics[topic]; !ok {
			if _, failing := t.todo[topic]; !failing {
				t.todo[topic] = ""
			}
		}
	}
	b.mu.RUnlock()
	t.mu.Unlock()
	b.kickTracker()
}

// Failing lists the wanted response topics that could not be subscribed,
// sorted, with the last error of each.
func (b *Bridge) Failing() []TopicFailure {
	t := &b.track
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []TopicFailure{}
	for _, topic := range slices.Sorted(maps.Keys(t.todo)) {
		if msg := t.todo[topic]; msg != "" {
			out = append(out, TopicFailure{Topic: topic, Error: msg})
		}
	}
	return out
}

// noteListen records the outcome of a subscription to topic.
func (b *Bridge) noteListen(topic string, err error) {
	t := &b.track
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.todo == nil {
		t.todo = map[string]string{}
	}
	switch {
	case err == nil:
		delete(t.todo, topic)
	case errors.Is(err, context.Canceled), errors.Is(err, ErrClosed):
	case t.wanted == nil || t.wanted[topic]:
		t.todo[topic] = err.Error()
	}
}

// kickTracker starts the background worker (once) and wakes it.
func (b *Bridge) kickTracker() {
	t := &b.track
	t.once.Do(func() {
		b.mu.Lock()
		closed := b.closed
		b.mu.Unlock()
		if closed {
			return
		}
		t.kick = make(chan struct{}, 1)
		t.stop = make(chan struct{})
		t.done = make(chan struct{})
		go b.trackLoop()
	})
	if t.kick != nil {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// stopTracker ends the background worker, if it runs, and waits for it.
func (b *Bridge) stopTracker() {
	t := &b.track
	t.once.Do(func() {}) // none starts after this
	if t.stop != nil {
		close(t.stop)
		<-t.done
	}
}

func (b *Bridge) trackLoop() {
	t := &b.track
	defer close(t.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := retryFirst
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		retry := false
		select {
		case <-t.stop:
			return
		case <-t.kick:
			backoff = retryFirst
		case <-timer.C:
			retry = true
		}
		timer.Stop()
		failed, busy := b.trackPass(ctx, retry)
		switch {
		case failed:
			timer.Reset(backoff)
			backoff = min(2*backoff, retryMax)
		case busy:
			timer.Reset(retryFirst) // release what calls still wait on
		default:
			backoff = retryFirst
		}
	}
}

// trackPass subscribes the topics to do (the failed ones too when retry)
// and releases the subscriptions no longer wanted. It reports whether some
// subscription failed and whether some release waits for calls.
func (b *Bridge) trackPass(ctx context.Context, retry bool) (failed, busy bool) {
	t := &b.track
	t.mu.Lock()
	var todo []string
	for topic, msg := range t.todo {
		if msg == "" || retry {
			todo = append(todo, topic)
		} else {
			failed = true // not due yet
		}
	}
	wanted := t.wanted
	t.mu.Unlock()
	if errs := b.listenMany(ctx, todo, false); len(errs) > 0 {
		failed = true
	}
	if wanted != nil {
		busy = b.release(wanted)
	}
	return failed, busy
}

// listenMany subscribes topics, listenParallel at a time, and returns the
// errors by topic. With detach, as Listen, a subscription under way is
// made to the end even if ctx ends.
func (b *Bridge) listenMany(ctx context.Context, topics []string, detach bool) map[string]error {
	var mu sync.Mutex
	errs := map[string]error{}
	sem := make(chan struct{}, listenParallel)
	var wg sync.WaitGroup
	for _, topic := range topics {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			errs[topic] = ctx.Err()
			return errs
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := b.listen(ctx, topic, detach); err != nil {
				mu.Lock()
				errs[topic] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// release closes the subscriptions of topics not wanted on which no call
// waits; it reports whether some are left for calls still waiting.
func (b *Bridge) release(wanted map[string]bool) (busy bool) {
	b.mu.RLock()
	var candidates []string
	for topic, l := range b.topics {
		if wanted[topic] {
			continue
		}
		select {
		case <-l.ready:
			candidates = append(candidates, topic)
		default:
			busy = true // being subscribed: look again later
		}
	}
	b.mu.RUnlock()
	if len(candidates) == 0 {
		return busy
	}
	inUse := map[string]bool{}
	b.pending.each(func(c *Call) { inUse[c.respTopic] = true })
	var subs []*listener
	// Locks in the order Track takes them: the tracker's, then the bridge's.
	b.track.mu.Lock()
	b.mu.Lock()
	for _, topic := range candidates {
		if inUse[topic] {
			busy = true
			continue
		}
		if l, ok := b.topics[topic]; ok && b.track.wanted != nil && !b.track.wanted[topic] {
			delete(b.topics, topic)
			subs = append(subs, l)
		}
	}
	b.mu.Unlock()
	b.track.mu.Unlock()
	for _, l := range subs {
		if l.sub != nil {
			_ = l.sub.Close()
		}
	}
	if len(subs) > 0 {
		b.log.Info("response subscriptions released (their services are gone)", "released", len(subs))
	}
	return busy
}
