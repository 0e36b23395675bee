package bridge_test

import (
	"errors"
	"testing"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
)

// A publish that fails after Call returned ends the call with the error
// Call would have returned, and counts it.
func TestAsyncPublishFailureEndsTheCall(t *testing.T) {
	for _, c := range []struct {
		outcome error
		want    error
	}{
		{errors.New("connection reset"), bridge.ErrUnavailable},
		{transport.ErrQueueFull, bridge.ErrOverloaded},
	} {
		b := bridge.New(&transporttest.Fake{Later: true, OnPublish: func(string, transport.Message) error { return c.outcome }}, bridge.Options{})
		call, err := b.Call(t.Context(), bridge.Target{RequestTopic: "req", ResponseTopic: "resp"}, wire.Request{}, bridge.CallOptions{})
		if err != nil {
			t.Fatalf("Call: %v", err)
		}
		if _, err := call.Recv(t.Context()); !errors.Is(err, c.want) {
			t.Errorf("publish failing with %v: Recv = %v, want %v", c.outcome, err, c.want)
		}
		if s := b.Stats(); s.PublishErrors != 1 || s.InFlight != 0 || s.Published != 0 {
			t.Errorf("stats %+v: want 1 publish error, nothing in flight or published", s)
		}
		b.Close()
	}
}
