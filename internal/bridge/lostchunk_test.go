package bridge_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
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
		if errors.Is(err, io.EOF) {
			t.Fatalf("the stream ended as a success after losing a chunk; got %q", got)
		}
		if err != nil {
			// The gateway sees the hole when the next chunk arrives; the
			// service's own report of the failed publish follows it.
			var we *wire.Error
			if !errors.Is(err, bridge.ErrLostReplies) &&
				(!errors.As(err, &we) || we.Type != wire.ErrorTypeToolService || !strings.Contains(we.Message, "could not be published")) {
				t.Fatalf("stream ended with %v, want the loss reported", err)
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

// droppingBroker delivers every reply message but the one numbered drop,
// as the broker does on a non-persistent topic when a consumer falls
// behind: the service sees its publish succeed.
type droppingBroker struct {
	*transport.Mem
	drop string
}

func (d *droppingBroker) PublishAsync(ctx context.Context, topic string, m transport.Message, done func(error)) error {
	if strings.Contains(topic, "/response/") && m.Properties[wire.PropSeq] == d.drop {
		go done(nil)
		return nil
	}
	return d.Mem.PublishAsync(ctx, topic, m, done)
}

func (d *droppingBroker) Publish(ctx context.Context, topic string, m transport.Message) error {
	if strings.Contains(topic, "/response/") && m.Properties[wire.PropSeq] == d.drop {
		return nil
	}
	return d.Mem.Publish(ctx, topic, m)
}

// A reply message the broker dropped on the way to the gateway ends the
// call with ErrLostReplies after the chunks before it: never a stream, or
// a joined answer, with a hole in it.
func TestDroppedReplyIsReported(t *testing.T) {
	for _, tc := range []struct {
		name, drop string
		before     []string
	}{
		{"a middle chunk", "2", []string{"0,", "1,"}},
		{"the first chunk", "0", nil},
		{"nothing dropped", "", []string{"0,", "1,", "2,", "3,", "4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := transport.NewMem()
			t.Cleanup(m.Close)
			f := start(t, &droppingBroker{Mem: m, drop: tc.drop}, echo.Handle)
			c, err := call(t, f, t.Context(), `{"mode":"stream","n":5}`)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			var got []string
			for {
				ch, err := c.Recv(ctx)
				if errors.Is(err, io.EOF) && tc.drop == "" {
					break
				}
				if err != nil {
					if tc.drop == "" || !errors.Is(err, bridge.ErrLostReplies) {
						t.Fatalf("after %q: %v, want ErrLostReplies", got, err)
					}
					break
				}
				got = append(got, ch.Text)
			}
			if strings.Join(got, "|") != strings.Join(tc.before, "|") {
				t.Fatalf("chunks %q, want %q", got, tc.before)
			}
		})
	}
}
