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
	// next holds answers for the next questions about a topic, one each,
	// the last of which stays the answer.
	next map[string][][]transport.Consumer
}

// answerNext has the next questions about topic answered by answers, one
// each; the last stays the answer.
func (s *consumersStub) answerNext(topic string, answers ...[]transport.Consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == nil {
		s.next = map[string][][]transport.Consumer{}
	}
	s.next[topic] = answers
}

// set gives topic consumers whose connection times are unknown.
func (s *consumersStub) set(topic string, ids ...string) {
	cs := make([]transport.Consumer, len(ids))
	for i, id := range ids {
		cs[i] = transport.Consumer{ID: id, Name: id}
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
	if q := s.next[topic]; len(q) > 0 {
		s.ids[topic], s.next[topic] = q[0], q[1:]
	}
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
	// Two more questions about each: the watch has looked and spared them.
	for _, name := range []string{"shared", "restarted"} {
		n := stub.questions(target(name).RequestTopic)
		waitFor(t, 5*time.Second, func() bool { return stub.questions(target(name).RequestTopic) >= n+2 })
	}
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

// A topic moving to another broker reconnects its consumers under their
// names: the calls they hold go on. A request published while no consumer
// was there (after the previous question, before the consumer connected
// again) was dropped: that call ends with ErrServiceGone at once, not at
// its deadline. A service that restarts (new consumers) while its old
// instance still finishes its calls (a Go SDK instance keeps its cancel
// subscription while it drains) leaves those calls alone; once nothing is
// left, two empty answers end them.
func TestWatchAcrossTopicMoves(t *testing.T) {
	const every = 100 * time.Millisecond
	_, stub, b := watchedBridge(t, every)
	target := bridge.Target{RequestTopic: wire.RequestTopic("moving"), ResponseTopic: wire.ResponseTopic("moving")}
	cancelTopic := wire.CancelTopic(target.RequestTopic)
	stub.setConsumers(target.RequestTopic, transport.Consumer{ID: "svc/a@1", Name: "svc/a", Since: time.Now().Add(-time.Hour)})
	call := func() (*bridge.Call, <-chan error) { return watchedCall(t, b, target) }
	notEnded := func(what string, ended <-chan error) {
		t.Helper()
		select {
		case err := <-ended:
			t.Fatalf("%s ended: %v", what, err)
		default:
		}
	}
	questions := func(n int) {
		t.Helper()
		at := stub.questions(target.RequestTopic)
		waitFor(t, 10*time.Second, func() bool { return stub.questions(target.RequestTopic) >= at+n })
	}
	_, held := call() // taken by the consumer before the move
	questions(2)

	// The move: one question sees no consumer; a call made then finds
	// none; the same consumer comes back, connected again.
	stub.setConsumers(target.RequestTopic)
	questions(1)
	_, inGap := call()
	stub.setConsumers(target.RequestTopic, transport.Consumer{ID: "svc/a@2", Name: "svc/a", Since: time.Now()})
	endsGone(t, inGap, "a call published while the topic moved")
	questions(3)
	notEnded("a call the moved consumer holds", held)
	_, after := call()

	// A restart: new consumers; the old instance drains (its cancel
	// subscription is still there, since before the calls were made).
	stub.setConsumers(cancelTopic, transport.Consumer{ID: "svc-cancel-old@1", Name: "svc-cancel-old", Since: time.Now().Add(-time.Hour)})
	stub.setConsumers(target.RequestTopic, transport.Consumer{ID: "svc/b@1", Name: "svc/b", Since: time.Now()})
	questions(3)
	notEnded("a call the draining instance holds", held)
	notEnded("another call the draining instance holds", after)

	// The old instance is gone for good, and so is every consumer: two
	// empty answers end the calls.
	stub.setConsumers(cancelTopic)
	stub.setConsumers(target.RequestTopic)
	endsGone(t, held, "a call to a service that is gone")
	endsGone(t, after, "another call to a service that is gone")
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
	before, err := b.Call(ctx, target, wire.Request{}, bridge.CallOptions{})
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
	after, err := b.Call(ctx, target, wire.Request{}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	n = stub.questions(wire.ReplyTopic("gw-1"))
	waitFor(t, 5*time.Second, func() bool { return stub.questions(wire.ReplyTopic("gw-1")) >= n+3 })
	for len(asked) > 0 {
		if id := <-asked; id != before.ID() {
			t.Fatalf("a reply was asked for the call made after the move (%s)", id)
		}
	}
	if s := b.Stats(); s.Resends < 1 || s.Resends > 3 {
		t.Fatalf("Stats().Resends = %d, want 1 to 3 (asked at most once a question until answered)", s.Resends)
	}
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
	c, err := b.Call(ctx, target, wire.Request{}, bridge.CallOptions{})
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

// countingStub is consumersStub that also answers the DeliveryCounter's
// question: with the excesses the test queued, one per answer, the last
// one from then on.
type countingStub struct {
	*consumersStub
	mu     sync.Mutex
	excess []int64
}

func (s *countingStub) setExcess(n ...int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.excess = n
}

func (s *countingStub) Delivery(context.Context, string, string) (transport.Delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.excess[0]
	if len(s.excess) > 1 {
		s.excess = s.excess[1:]
	}
	return transport.Delivery{In: 1000 + e, Out: 1000, Lifetime: "sub/c@1"}, nil
}

// The end of a stream from a service that does not number its replies,
// on a non-persistent topic, waits for the watch's word: passed on when
// the broker dropped nothing for this bridge on the topic meanwhile, or
// when what seemed dropped was only in flight; the call ends with
// ErrLostReplies when messages were dropped — a hole in such a stream
// would not show otherwise.
func TestWatchHoldsUnnumberedStreamEnds(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	stub := &countingStub{consumersStub: &consumersStub{ids: map[string][]transport.Consumer{}, asked: map[string]int{}}}
	b := bridge.New(m, bridge.Options{Watch: stub, WatchEvery: 20 * time.Millisecond})
	t.Cleanup(b.Close)
	target := bridge.Target{RequestTopic: wire.RequestTopic("py"), ResponseTopic: wire.ResponseTopic("py")}
	sub, err := m.Subscribe(t.Context(), target.RequestTopic, "svc", transport.Shared, func(transport.Message) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	stub.set(target.RequestTopic, "svc/a")
	reply := func(c *bridge.Call, text string, last bool) {
		t.Helper()
		if err := m.Publish(t.Context(), target.ResponseTopic, transport.Message{Payload: wire.EncodeResponse(wire.Response{Response: text, EndOfStream: last}),
			Properties: map[string]string{wire.PropID: c.ID()}}); err != nil {
			t.Fatal(err)
		}
	}
	stream := func(rise, settle int64) (string, error) {
		t.Helper()
		stub.setExcess(0)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		c, err := b.Call(ctx, target, wire.Request{}, bridge.CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		reply(c, "a,", false)
		reply(c, "b,", false)
		stub.setExcess(rise, settle) // dropped, or in flight at one answer
		reply(c, "c", true)
		return c.Wait(ctx)
	}
	if out, err := stream(0, 0); err != nil || out != "a,b,c" {
		t.Fatalf("nothing dropped: %q, %v; want the whole stream", out, err)
	}
	if out, err := stream(2, 0); err != nil || out != "a,b,c" {
		t.Fatalf("messages in flight when asked: %q, %v; want the whole stream", out, err)
	}
	var dropped *bridge.DroppedError
	if out, err := stream(2, 2); !errors.Is(err, bridge.ErrLostReplies) || !errors.As(err, &dropped) || dropped.Dropped != 2 {
		t.Fatalf("messages dropped: %q, %v; want a DroppedError of 2", out, err)
	}
}
