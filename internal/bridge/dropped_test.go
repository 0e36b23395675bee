package bridge_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
)

// The broker acknowledges a message it dropped on a non-persistent topic
// (too many in hand on the publisher's connection) with an id of its own,
// which the transport reports as ErrDropped. A Go SDK service sends its
// last reply again then, rather than leave the caller to its deadline.
func TestDroppedLastReplyIsSentAgain(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	var finals atomic.Int64
	br := &transporttest.Hooked{Mem: m, Hook: func(topic string, msg transport.Message) (bool, error) {
		if strings.Contains(topic, "/response/") {
			if r, err := wire.DecodeResponse(msg.Payload); err == nil && r.EndOfStream && finals.Add(1) == 1 {
				return true, transport.ErrDropped
			}
		}
		return false, nil
	}}
	f := start(t, br, echo.Handle)
	c, err := call(t, f, t.Context(), `{"msg":"hello"}`)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Wait(ctxTimeout(t, 5*time.Second))
	if err != nil || got != "hello" {
		t.Fatalf("a call whose last reply the broker dropped once: %q, %v; want it answered", got, err)
	}
	if n := finals.Load(); n != 2 {
		t.Fatalf("the last reply was published %d times, want 2 (dropped, then sent again)", n)
	}
}

// deliveryStub is consumersStub whose DeliveryCounter answers per topic:
// messages in less those sent, as the test sets them (0 until then).
type deliveryStub struct {
	*consumersStub
	mu     sync.Mutex
	excess map[string]int64
}

func (s *deliveryStub) setExcess(topic string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.excess[topic] = n
}

func (s *deliveryStub) Delivery(_ context.Context, topic, _ string) (transport.Delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return transport.Delivery{In: 1000 + s.excess[topic], Out: 1000, Lifetime: "sub/c@1"}, nil
}

// A Go SDK service's last reply dropped by the broker on its way to this
// gateway would leave the call to its deadline — the numbers show a hole
// only when a message comes after it. When the broker's counts of the
// topic the reply comes on show a drop, the calls waiting there ask their
// services for their last replies again, and end whole.
func TestDroppedLastReplyIsAskedForAgain(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	stub := &deliveryStub{consumersStub: &consumersStub{ids: map[string][]transport.Consumer{}, asked: map[string]int{}}, excess: map[string]int64{}}
	replyTopic := wire.ReplyTopic("drops")
	b := bridge.New(m, bridge.Options{Watch: stub, WatchEvery: 20 * time.Millisecond, ReplyTopic: replyTopic})
	t.Cleanup(b.Close)
	target := bridge.Target{RequestTopic: wire.RequestTopic("drops"), ResponseTopic: wire.ResponseTopic("drops")}
	stub.set(target.RequestTopic, "svc/a")
	reply := func(id, seq string, r wire.Response) {
		if err := m.Publish(context.Background(), replyTopic, transport.Message{Payload: wire.EncodeResponse(r),
			Properties: map[string]string{wire.PropID: id, wire.PropSeq: seq}}); err != nil {
			t.Error(err)
		}
	}
	// The service answers "a," and then "b" (last), which the broker drops;
	// asked again, it sends "b" once more.
	req, err := m.Subscribe(t.Context(), target.RequestTopic, "svc", transport.Shared, func(msg transport.Message) {
		reply(msg.Properties[wire.PropID], "0", wire.Response{Response: "a,"})
		stub.setExcess(replyTopic, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = req.Close() })
	var asked atomic.Int64
	cancels, err := m.Subscribe(t.Context(), wire.CancelTopic(target.RequestTopic), "svc-cancel", transport.Exclusive, func(msg transport.Message) {
		if msg.Properties[wire.PropCredit] == wire.CreditResend {
			asked.Add(1)
			reply(msg.Properties[wire.PropID], "1", wire.Response{Response: "b", EndOfStream: true})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cancels.Close() })
	c, err := b.Call(t.Context(), target, wire.Request{Arguments: "{}"}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Wait(ctxTimeout(t, 5*time.Second))
	if err != nil || got != "a,b" {
		t.Fatalf("a call whose last reply the broker dropped: %q, %v; want a,b once asked for again", got, err)
	}
	if asked.Load() == 0 {
		t.Fatal("the service was not asked for its last reply again")
	}
}
