package bridge_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// lossyBroker loses the third stream chunk a service publishes: the broker
// takes it, then reports a failure, as a connection that drops would.
type lossyBroker struct {
	*transport.Mem
	chunks atomic.Int64
}

func (l *lossyBroker) PublishAsync(ctx context.Context, topic string, m transport.Message, done func(error)) error {
	if strings.Contains(topic, "/response/") {
		if r, err := wire.DecodeResponse(m.Payload); err == nil && !r.EndOfStream && l.chunks.Add(1) == 3 {
			go done(errors.New("connection reset"))
			return nil
		}
	}
	return l.Mem.PublishAsync(ctx, topic, m, done)
}

// A stream that lost a chunk must not end as a success: the service
// reports the loss instead of its final reply.
func TestLostChunkEndsTheStreamWithAnError(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	br := &lossyBroker{Mem: m}
	f := start(t, br, echo.Handle)
	c, err := call(t, f, t.Context(), `{"mode":"stream","n":10}`)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []string
	for {
		ch, err := c.Recv(ctx)
		if err == io.EOF {
			t.Fatalf("the stream ended as a success after losing a chunk; got %q", got)
		}
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) || we.Type != wire.ErrorTypeToolService || !strings.Contains(we.Message, "could not be published") {
				t.Fatalf("stream ended with %v, want a tool-service-error naming the lost chunk", err)
			}
			break
		}
		got = append(got, ch.Text)
	}
	for _, text := range got {
		if text == "2," {
			t.Fatalf("the lost chunk arrived: %q", got)
		}
	}
}
