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
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
)

// lossy loses the third stream chunk a service publishes: the broker
// takes it, then reports a failure, as a connection that drops would.
func lossy(m *transport.Mem) *transporttest.Hooked {
	var chunks atomic.Int64
	return &transporttest.Hooked{Mem: m, Hook: func(topic string, msg transport.Message) (bool, error) {
		if strings.Contains(topic, "/response/") {
			if r, err := wire.DecodeResponse(msg.Payload); err == nil && !r.EndOfStream && chunks.Add(1) == 3 {
				return true, errors.New("connection reset")
			}
		}
		return false, nil
	}}
}

// A stream that lost a chunk must not end as a success: the service
// reports the loss instead of its final reply.
func TestLostChunkEndsTheStreamWithAnError(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	br := lossy(m)
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

// dropping delivers every reply message but the one numbered drop, as the
// broker does on a non-persistent topic when a consumer falls behind: the
// service sees its publish succeed.
func dropping(m *transport.Mem, drop string) *transporttest.Hooked {
	return &transporttest.Hooked{Mem: m, Hook: func(topic string, msg transport.Message) (bool, error) {
		return strings.Contains(topic, "/response/") && msg.Properties[wire.PropSeq] == drop, nil
	}}
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
			f := start(t, dropping(m, tc.drop), echo.Handle)
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
