package bridge_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// holding is the in-memory broker whose publishes, while hold is set,
// are taken and never acknowledged: a broker gone away, whose client
// keeps what it was given until it connects again.
type holding struct {
	*transport.Mem
	mu   sync.Mutex
	hold bool
}

func (h *holding) PublishAsync(ctx context.Context, topic string, m transport.Message, done func(error)) error {
	h.mu.Lock()
	held := h.hold
	h.mu.Unlock()
	if held {
		return nil
	}
	return h.Mem.PublishAsync(ctx, topic, m, done)
}

func (h *holding) setHold(v bool) {
	h.mu.Lock()
	h.hold = v
	h.mu.Unlock()
}

// Once the broker is found not to take messages, calls are refused at
// once with ErrBrokerDown (UNAVAILABLE), calls whose request the broker
// never took end with it, those it took go on; once it takes messages
// again, calls are served. A failed probe older than a request the broker
// took says nothing.
func TestBrokerDownFailsCallsFast(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	br := &holding{Mem: m}
	b := bridge.New(br, bridge.Options{})
	t.Cleanup(b.Close)
	target := bridge.Target{RequestTopic: wire.RequestTopic("down"), ResponseTopic: wire.ResponseTopic("down")}
	var (
		mu  sync.Mutex
		ids []string
	)
	sub, err := m.Subscribe(t.Context(), target.RequestTopic, "svc", transport.Shared, func(msg transport.Message) {
		mu.Lock()
		ids = append(ids, msg.Properties[wire.PropID])
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	answer := func(c *bridge.Call) {
		t.Helper()
		if err := m.Publish(t.Context(), target.ResponseTopic, transport.Message{Payload: wire.EncodeResponse(wire.Response{Response: "ok", EndOfStream: true}),
			Properties: map[string]string{wire.PropID: c.ID()}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	call := func() (*bridge.Call, error) {
		return b.Call(ctx, target, wire.Request{Arguments: "{}"}, bridge.CallOptions{})
	}

	probeSent := time.Now()
	taken, err := call() // the broker takes this one
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if b.BrokerDown(errors.New("no receipt"), probeSent) {
		t.Fatal("a probe sent before a request the broker took marked the broker down")
	}
	br.setHold(true)
	lost, err := call() // this one the broker never acknowledges
	if err != nil {
		t.Fatal(err)
	}
	defer lost.Close()
	if !b.BrokerDown(errors.New("no receipt"), time.Now()) {
		t.Fatal("BrokerDown declined, though no request was taken since the probe")
	}
	if _, err := lost.Wait(ctx); !errors.Is(err, bridge.ErrBrokerDown) || !errors.Is(err, bridge.ErrUnavailable) {
		t.Fatalf("a call whose request the broker never took ended with %v, want ErrBrokerDown", err)
	}
	if _, err := call(); !errors.Is(err, bridge.ErrBrokerDown) {
		t.Fatalf("a call while the broker is down: %v, want ErrBrokerDown at once", err)
	}
	answer(taken)
	if out, err := taken.Wait(ctx); err != nil || out != "ok" {
		t.Fatalf("a call the broker had taken: %q, %v; want its answer", out, err)
	}

	br.setHold(false)
	b.BrokerUp()
	again, err := call()
	if err != nil {
		t.Fatalf("a call once the broker is back: %v", err)
	}
	defer again.Close()
	answer(again)
	if out, err := again.Wait(ctx); err != nil || out != "ok" {
		t.Fatalf("a call once the broker is back: %q, %v", out, err)
	}
}
