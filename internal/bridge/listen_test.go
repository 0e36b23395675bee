package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// flakyBroker refuses the first fails subscriptions, as a broker that is
// not up yet does.
type flakyBroker struct {
	*transport.Mem
	fails atomic.Int32
	subs  atomic.Int32
}

func (f *flakyBroker) Subscribe(ctx context.Context, topic, sub string, typ transport.SubscriptionType, h transport.Handler) (transport.Subscription, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, errors.New("connection refused")
	}
	f.subs.Add(1)
	return f.Mem.Subscribe(ctx, topic, sub, typ, h)
}

// ListenAll keeps trying until the broker is reachable, asking for the
// topics again on each round, and gives up only when ctx ends; a topic
// still failing then is subscribed in the background.
func TestListenAll(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	br := &flakyBroker{Mem: m}
	br.fails.Store(2)
	b := bridge.New(br, bridge.Options{})
	defer b.Close()
	rounds := 0
	topics := func() []string {
		rounds++
		if rounds == 1 {
			return []string{"resp/a"}
		}
		return []string{"resp/a", "resp/b"} // a reload added a service
	}
	if err := b.ListenAll(t.Context(), topics); err != nil {
		t.Fatal(err)
	}
	if rounds < 2 || br.subs.Load() < 1 {
		t.Fatalf("%d rounds, %d subscriptions; want retries until the broker took one", rounds, br.subs.Load())
	}
	eventually.True(t, 10*time.Second, "both topics subscribed in the background", func() bool {
		return br.subs.Load() == 2 && len(b.Failing()) == 0
	})

	down := &flakyBroker{Mem: m}
	down.fails.Store(1 << 30)
	b2 := bridge.New(down, bridge.Options{})
	defer b2.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := b2.ListenAll(ctx, func() []string { return []string{"resp/c"} }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("broker never up: %v, want the context's error", err)
	}
}

// badTopicBroker refuses every subscription to one topic, as the broker
// does for a topic in a tenant that does not exist.
type badTopicBroker struct {
	*transport.Mem
	bad   string
	tries atomic.Int32
}

func (f *badTopicBroker) Subscribe(ctx context.Context, topic, sub string, typ transport.SubscriptionType, h transport.Handler) (transport.Subscription, error) {
	if topic == f.bad {
		f.tries.Add(1)
		return nil, errors.New("TopicNotFound: tenant nosuch does not exist")
	}
	return f.Mem.Subscribe(ctx, topic, sub, typ, h)
}

// One topic that can never be subscribed does not hold up readiness: the
// others are subscribed, ListenAll returns, the bad one is listed by
// Failing and retried in the background until it is no longer wanted.
func TestListenAllOneBadTopic(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	br := &badTopicBroker{Mem: m, bad: "persistent://nosuch/x/resp"}
	b := bridge.New(br, bridge.Options{ReplyTopic: "reply/me"})
	defer b.Close()
	topics := []string{"resp/a", br.bad, "resp/b"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := b.ListenAll(ctx, func() []string { return topics }); err != nil {
		t.Fatalf("ListenAll: %v", err)
	}
	for _, topic := range []string{"reply/me", "resp/a", "resp/b"} {
		if m.Subscribers(topic) != 1 {
			t.Errorf("%s not subscribed", topic)
		}
	}
	if f := b.Failing(); len(f) != 1 || f[0].Topic != br.bad {
		t.Fatalf("failing %v, want the bad topic", f)
	}
	b.Track(topics)
	eventually.True(t, 10*time.Second, "the bad topic retried in the background (3 tries)", func() bool { return br.tries.Load() >= 3 })
	b.Track([]string{"resp/a", "resp/b"}) // its service withdrew
	if f := b.Failing(); len(f) != 0 {
		t.Fatalf("failing %v after the topic is no longer wanted", f)
	}
}

// Track subscribes new topics in the background and releases those no
// longer named, except while a call waits for a reply on one.
func TestTrackReleases(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	b := bridge.New(m, bridge.Options{})
	defer b.Close()
	var topics []string
	for i := range 50 {
		topics = append(topics, fmt.Sprintf("resp/%d", i))
	}
	b.Track(topics)
	waitUntil(t, func() bool {
		for _, topic := range topics {
			if m.Subscribers(topic) != 1 {
				return false
			}
		}
		return true
	})
	// A call waits on resp/0 when its service withdraws.
	unsub, err := m.Subscribe(t.Context(), "req/0", "svc", transport.Shared, func(transport.Message) {})
	if err != nil {
		t.Fatal(err)
	}
	defer unsub.Close()
	c, err := b.Call(t.Context(), bridge.Target{RequestTopic: "req/0", ResponseTopic: "resp/0"}, wire.Request{}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Track(nil)
	waitUntil(t, func() bool {
		for _, topic := range topics[1:] {
			if m.Subscribers(topic) != 0 {
				return false
			}
		}
		return true
	})
	if m.Subscribers("resp/0") != 1 {
		t.Fatal("the subscription a call waits on was released")
	}
	c.Close()
	waitUntil(t, func() bool { return m.Subscribers("resp/0") == 0 })
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	eventually.True(t, 10*time.Second, "the condition", cond)
}

// Track called again and again while the background worker subscribes and
// releases (a registry updated by a stream of announcements) never
// deadlocks, and ends with exactly the topics named last.
func TestTrackConcurrentUpdates(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	b := bridge.New(m, bridge.Options{})
	defer b.Close()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				var topics []string
				for j := range i % 40 {
					topics = append(topics, fmt.Sprintf("resp/%d", j))
				}
				b.Track(topics)
				_ = b.Failing()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Track blocked")
	}
	b.Track([]string{"resp/1"})
	waitUntil(t, func() bool {
		for j := range 40 {
			want := 0
			if j == 1 {
				want = 1
			}
			if m.Subscribers(fmt.Sprintf("resp/%d", j)) != want {
				return false
			}
		}
		return true
	})
}
