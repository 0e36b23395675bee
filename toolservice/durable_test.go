package toolservice

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
)

// restarting is a broker whose sends to one topic time out a number of
// times, as while the broker restarts, before it takes them again.
type restarting struct {
	*transport.Mem
	topic string
	fail  atomic.Int64 // sends to topic left to fail
	tries atomic.Int64 // sends to topic
}

var errSendTimeout = errors.New("send timeout (the test's broker is restarting)")

func (b *restarting) PublishAsync(ctx context.Context, topic string, msg transport.Message, done func(error)) error {
	if topic == b.topic {
		b.tries.Add(1)
		if b.fail.Add(-1) >= 0 {
			go done(errSendTimeout)
			return nil
		}
	}
	return b.Mem.PublishAsync(ctx, topic, msg, done)
}

// The reply to a durable operation (a persistent reply-to) whose send
// times out is sent again until the broker takes it, within the
// operation's deadline.
func TestDurableReplySentAgainUntilTaken(t *testing.T) {
	const replyTo = "persistent://tg/response/toolgate.operations.0123456789abcdef"
	mem := transport.NewMem()
	defer mem.Close()
	got := make(chan transport.Message, 10)
	sub, err := mem.Subscribe(t.Context(), replyTo, "gateways", transport.Shared, func(m transport.Message) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	broker := &restarting{Mem: mem, topic: replyTo}
	svc, err := New(Config{ID: "svc", Topic: "durable", Logger: slog.New(slog.DiscardHandler)},
		func(_ context.Context, r *Request) (any, error) { return "answer", nil }, WithPulsarClient(transporttest.PulsarClient(broker)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	<-svc.Ready()
	call := func(id string, deadline time.Time) {
		t.Helper()
		if err := mem.Publish(t.Context(), wire.RequestTopic("durable"), transport.Message{Payload: wire.EncodeRequest(wire.Request{}),
			Properties: map[string]string{wire.PropID: id, wire.PropReplyTo: replyTo,
				wire.PropDeadline: strconv.FormatInt(deadline.UnixMilli(), 10)}}); err != nil {
			t.Fatal(err)
		}
	}

	broker.fail.Store(3)
	call("op1", time.Now().Add(time.Minute))
	select {
	case m := <-got:
		if m.Properties[wire.PropID] != "op1" || m.Key != "op1" {
			t.Fatalf("reply %v", m.Properties)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the reply never arrived (%d sends tried)", broker.tries.Load())
	}
	if n := broker.tries.Load(); n != 4 {
		t.Fatalf("%d sends, want 4 (3 timed out)", n)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
