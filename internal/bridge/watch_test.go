package bridge_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// consumersStub answers Consumers with what the test set, per topic, and
// counts the questions.
type consumersStub struct {
	mu    sync.Mutex
	ids   map[string][]string
	asked map[string]int
}

func (s *consumersStub) set(topic string, ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[topic] = ids
}

func (s *consumersStub) questions(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[topic]
}

func (s *consumersStub) Consumers(_ context.Context, topic string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked[topic]++
	return slices.Clone(s.ids[topic]), nil
}

// The watch ends the calls whose service's consumers are gone: all of
// them when none is left, and when every consumer was replaced, those
// published before; while some of several consumers stay, calls go on;
// topics without calls in flight are not asked about.
func TestWatchEndsCallsOfAServiceThatIsGone(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	stub := &consumersStub{ids: map[string][]string{}, asked: map[string]int{}}
	const every = 20 * time.Millisecond
	b := bridge.New(m, bridge.Options{Watch: stub, WatchEvery: every})
	t.Cleanup(b.Close)

	// A service that takes requests and never answers: its consumer holds
	// them, as a service killed mid-call did.
	target := func(name string) bridge.Target {
		return bridge.Target{RequestTopic: wire.RequestTopic(name), ResponseTopic: wire.ResponseTopic(name)}
	}
	for _, name := range []string{"gone", "shared", "idle", "restarted"} {
		sub, err := m.Subscribe(t.Context(), target(name).RequestTopic, "svc", transport.Shared, func(transport.Message) {})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close() })
	}
	stub.set(target("gone").RequestTopic, "a")
	stub.set(target("shared").RequestTopic, "a", "b")
	stub.set(target("idle").RequestTopic, "a")
	stub.set(target("restarted").RequestTopic, "a")

	call := func(name string) (*bridge.Call, <-chan error) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		t.Cleanup(cancel)
		c, err := b.Call(ctx, target(name), wire.Request{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		ended := make(chan error, 1)
		go func() { _, err := c.Wait(ctx); ended <- err }()
		return c, ended
	}
	_, gone := call("gone")
	_, shared := call("shared")
	_, restartedOld := call("restarted")
	// Asked at least twice: the calls above are known to the watch.
	waitFor(t, 5*time.Second, func() bool { return stub.questions(target("restarted").RequestTopic) >= 2 })

	stub.set(target("gone").RequestTopic)                   // killed: nobody left
	stub.set(target("shared").RequestTopic, "b")            // one of two instances left
	stub.set(target("restarted").RequestTopic, "a-restart") // replaced between two questions
	start := time.Now()
	for name, ended := range map[string]<-chan error{"gone": gone, "restarted": restartedOld} {
		select {
		case err := <-ended:
			if !errors.Is(err, bridge.ErrServiceGone) {
				t.Errorf("%s: call ended with %v, want ErrServiceGone", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the call was not ended within 5 s of its service going away", name)
		}
	}
	t.Logf("calls ended %v after their consumers went away (watch period %v)", time.Since(start), every)
	// A call made after the restart reached the new consumer: it waits on,
	// as does the one to the service that still has an instance.
	_, restartedNew := call("restarted")
	time.Sleep(10 * every)
	for name, ended := range map[string]<-chan error{"shared": shared, "restarted after": restartedNew} {
		select {
		case err := <-ended:
			t.Errorf("%s: a call that may still be answered ended: %v", name, err)
		default:
		}
	}
	if n := stub.questions(target("idle").RequestTopic); n != 0 {
		t.Errorf("a topic without calls in flight was asked about %d times", n)
	}
}
