package bridge_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// stalled is a broker whose inline publish waits for the broker's
// receipt until its context ends or the message's deadline passes, as the
// Pulsar transport's does while the request topic's broker fails over and
// the topic has no owner yet.
type stalled struct{ *transport.Mem }

func (s stalled) PublishInline(ctx context.Context, _ string, msg transport.Message, done func(error)) error {
	if !msg.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, msg.Deadline)
		defer cancel()
	}
	<-ctx.Done()
	done(ctx.Err())
	return nil
}

// A call's own deadline (CallOptions.Deadline) ends a publish that waits
// for the broker, also when the caller's context lasts longer.
func TestCallDeadlineEndsAStalledPublish(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	b := bridge.New(stalled{m}, bridge.Options{})
	t.Cleanup(b.Close)
	target := bridge.Target{RequestTopic: wire.RequestTopic("stalled"), ResponseTopic: wire.ResponseTopic("stalled")}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // the caller's, far later than the call's own
	defer cancel()
	start := time.Now()
	c, err := b.Call(ctx, target, wire.Request{}, bridge.CallOptions{Deadline: start.Add(200 * time.Millisecond)})
	if err == nil {
		defer c.Close()
		_, err = c.Wait(ctx)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want deadline exceeded", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the call ended with the caller's context, not at its own deadline")
	}
}
