package bridge_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
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

// ListenAll keeps trying until every topic is subscribed, asking for the
// topics again on each round, and gives up only when ctx ends.
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
	if rounds < 3 || br.subs.Load() != 2 {
		t.Fatalf("%d rounds, %d subscriptions; want retries until both topics are subscribed", rounds, br.subs.Load())
	}

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
