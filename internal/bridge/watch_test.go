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
	ids   map[string][]transport.Consumer
	asked map[string]int
}

// set gives topic consumers whose connection times are unknown.
func (s *consumersStub) set(topic string, ids ...string) {
	cs := make([]transport.Consumer, len(ids))
	for i, id := range ids {
		cs[i] = transport.Consumer{ID: id}
	}
	s.setConsumers(topic, cs...)
}

func (s *consumersStub) setConsumers(topic string, cs ...transport.Consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[topic] = cs
}

func (s *consumersStub) questions(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[topic]
}

func (s *consumersStub) Consumers(_ context.Context, topic string) ([]transport.Consumer, error) {
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
	const every = 20 * time.Millisecond
	m, stub, b := watchedBridge(t, every)

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

	call := func(name string) (*bridge.Call, <-chan error) { return watchedCall(t, b, target(name)) }
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

// When every consumer of a request topic connected after a call was made
// (the topic moved to another broker, which reconnects every consumer, or
// the service restarted), the call ends with ErrServiceGone at the next
// question instead of at its deadline: its request found no consumer on
// the way, or the one that took it has left. A stream whose replies keep
// coming goes on; one whose replies stop ends a question later; calls
// made after the consumers connected wait on.
func TestWatchEndsCallsMadeBeforeEveryConsumerConnected(t *testing.T) {
	const every = 20 * time.Millisecond
	m, stub, b := watchedBridge(t, every)
	target := bridge.Target{RequestTopic: wire.RequestTopic("moving"), ResponseTopic: wire.ResponseTopic("moving")}
	sub, err := m.Subscribe(t.Context(), target.RequestTopic, "svc", transport.Shared, func(transport.Message) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	stub.setConsumers(target.RequestTopic, transport.Consumer{ID: "a@1", Since: time.Now().Add(-time.Hour)})

	call := func() (*bridge.Call, <-chan error) { return watchedCall(t, b, target) }
	// chunks sends reply messages for c every few milliseconds until stop
	// is closed.
	chunks := func(c *bridge.Call, stop <-chan struct{}) {
		go func() {
			payload := wire.EncodeResponse(wire.Response{Response: "x"})
			for {
				select {
				case <-stop:
					return
				case <-time.After(every / 4):
				}
				_ = m.Publish(context.Background(), target.ResponseTopic, transport.Message{Payload: payload, Properties: map[string]string{wire.PropID: c.ID()}})
			}
		}()
	}
	_, unary := call()
	flowing, flowingEnded := call()
	stops, stopping := call()
	keep, stopNow := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(keep) })
	chunks(flowing, keep)
	chunks(stops, stopNow)
	waitFor(t, 5*time.Second, func() bool { return stub.questions(target.RequestTopic) >= 2 })

	// The topic moves: the same consumer, connected again now.
	stub.setConsumers(target.RequestTopic, transport.Consumer{ID: "a@2", Since: time.Now()})
	endsGone(t, unary, "a call made before every consumer connected")
	_, after := call() // made after the consumer connected: it reached it
	close(stopNow)
	endsGone(t, stopping, "a stream whose replies stopped after the move")
	time.Sleep(10 * every)
	for name, ended := range map[string]<-chan error{"a stream whose replies go on": flowingEnded, "a call made after the move": after} {
		select {
		case err := <-ended:
			t.Fatalf("%s ended: %v", name, err)
		default:
		}
	}

	// A question falls in the move's gap and sees no consumer (the calls
	// made before it end); a call made after it, just before the consumer
	// is back, was dropped on the way: since the consumer connected after
	// the call was made, it ends too, though no question saw it alone.
	stub.setConsumers(target.RequestTopic)
	n := stub.questions(target.RequestTopic)
	waitFor(t, 5*time.Second, func() bool { return stub.questions(target.RequestTopic) >= n+1 })
	_, inGap := call()
	stub.setConsumers(target.RequestTopic, transport.Consumer{ID: "a@3", Since: time.Now()})
	endsGone(t, inGap, "a call made in the gap")
}

// watchedBridge is a bridge on the in-memory broker whose watch asks stub
// every so often.
func watchedBridge(t *testing.T, every time.Duration) (*transport.Mem, *consumersStub, *bridge.Bridge) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	stub := &consumersStub{ids: map[string][]transport.Consumer{}, asked: map[string]int{}}
	b := bridge.New(m, bridge.Options{Watch: stub, WatchEvery: every})
	t.Cleanup(b.Close)
	return m, stub, b
}

// watchedCall makes a call to target that nobody answers but the test, and
// returns it with a channel that gets the error its reader ends with.
func watchedCall(t *testing.T, b *bridge.Bridge, target bridge.Target) (*bridge.Call, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	c, err := b.Call(ctx, target, wire.Request{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := c.Recv(ctx); err != nil {
				ended <- err
				return
			}
		}
	}()
	return c, ended
}

// endsGone waits up to 5 s for a call to end with ErrServiceGone.
func endsGone(t *testing.T, ended <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ended:
		if !errors.Is(err, bridge.ErrServiceGone) {
			t.Fatalf("%s ended with %v, want ErrServiceGone", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not end within 5 s", what)
	}
}

// When this bridge's consumer of its reply topic has connected again
// since the previous question (the topic moved to another broker), a
// reply published meanwhile was dropped: the calls made before, still
// waiting, ask their services for their last reply again, once, and a
// service that sent it sends it again. Calls made after are not asked for.
func TestWatchAsksForRepliesLostWhileTheReplyTopicMoved(t *testing.T) {
	m, stub, b := func() (*transport.Mem, *consumersStub, *bridge.Bridge) {
		m := transport.NewMem()
		t.Cleanup(m.Close)
		stub := &consumersStub{ids: map[string][]transport.Consumer{}, asked: map[string]int{}}
		b := bridge.New(m, bridge.Options{Watch: stub, WatchEvery: 20 * time.Millisecond, ReplyTopic: wire.ReplyTopic("gw-1")})
		t.Cleanup(b.Close)
		return m, stub, b
	}()
	target := bridge.Target{RequestTopic: wire.RequestTopic("svc"), ResponseTopic: wire.ResponseTopic("svc")}
	// The service: it answers nothing by itself (its reply was lost), and
	// answers a resend with the reply it keeps.
	asked := make(chan string, 10)
	for topic, h := range map[string]transport.Handler{
		target.RequestTopic: func(transport.Message) {},
		wire.CancelTopic(target.RequestTopic): func(msg transport.Message) {
			if msg.Properties[wire.PropCredit] != wire.CreditResend {
				return
			}
			id := msg.Properties[wire.PropID]
			asked <- id
			go func() {
				_ = m.Publish(context.Background(), wire.ReplyTopic("gw-1"), transport.Message{Payload: wire.EncodeResponse(wire.Response{Response: "kept " + id, EndOfStream: true}),
					Properties: map[string]string{wire.PropID: id, wire.PropSeq: "0"}})
			}()
		},
	} {
		sub, err := m.Subscribe(t.Context(), topic, "svc", transport.Shared, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close() })
	}
	svc := transport.Consumer{ID: "svc/a@1", Since: time.Now().Add(-time.Hour)}
	stub.setConsumers(target.RequestTopic, svc)
	ours := func(since time.Time) transport.Consumer {
		return transport.Consumer{ID: b.Subscription() + "/gw@1@" + since.String(), Since: since}
	}
	stub.setConsumers(wire.ReplyTopic("gw-1"), ours(time.Now().Add(-time.Minute)), transport.Consumer{ID: "spy/x@2", Since: time.Now()})

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	before, err := b.Call(ctx, target, wire.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	n := stub.questions(wire.ReplyTopic("gw-1"))
	waitFor(t, 5*time.Second, func() bool { return stub.questions(wire.ReplyTopic("gw-1")) >= n+2 })
	select {
	case id := <-asked:
		t.Fatalf("a reply (%s) was asked for while the consumer stayed connected", id)
	default:
	}

	// The reply topic moves: our consumer is connected again from now on.
	stub.setConsumers(wire.ReplyTopic("gw-1"), ours(time.Now()))
	out, err := before.Wait(ctx)
	if err != nil || out != "kept "+before.ID() {
		t.Fatalf("the call made before the move: %q, %v; want its reply sent again (%+v)", out, err, b.Stats())
	}
	after, err := b.Call(ctx, target, wire.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	n = stub.questions(wire.ReplyTopic("gw-1"))
	waitFor(t, 5*time.Second, func() bool { return stub.questions(wire.ReplyTopic("gw-1")) >= n+3 })
	if got := len(asked); got != 1 {
		t.Fatalf("%d more resends asked for; want only the one for the call made before the move", got)
	}
	if s := b.Stats(); s.Resends != 1 {
		t.Fatalf("Stats().Resends = %d, want 1", s.Resends)
	}
}
