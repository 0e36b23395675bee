package bridge

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// FuzzRoute feeds arbitrary reply bytes to a waiting call: the bridge must
// never panic, and the call must get exactly what the reply says — the
// chunk, the service's error, or a malformed-reply error — while a reply
// without a matching id is counted as an orphan and delivered to nobody.
func FuzzRoute(f *testing.F) {
	for _, s := range []string{
		`{"error": null, "response": "hi", "end_of_stream": true}`,
		`{"error": {"type": "x", "message": "y"}, "end_of_stream": true}`,
		`{"response": "part"}`, `not json`, `[]`, `{"response": 1}`, ``, "\xff", `{"error": {}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		m := transport.NewMem()
		b := New(m, Options{})
		defer b.Close()
		c := &Call{b: b, id: "fuzz", notify: make(chan struct{}, 1), respTopic: "t"}
		b.inFlight.Add(1)
		b.pending.store(c.id, c)
		b.route("t", transport.Message{Payload: payload, Properties: map[string]string{wire.PropID: "fuzz"}})
		b.route("t", transport.Message{Payload: payload, Properties: map[string]string{}}) // no id: an orphan
		if got := b.Stats().OrphanReplies; got != 1 {
			t.Fatalf("%d orphan replies, want 1", got)
		}
		// Everything was routed before Recv: it must not have to wait.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ch, err := c.Recv(ctx)
		want, derr := wire.DecodeResponse(payload)
		var we *wire.Error
		switch {
		case derr != nil:
			if !errors.Is(err, ErrBadReply) {
				t.Fatalf("malformed reply %q: got %v, want ErrBadReply", payload, err)
			}
		case want.Error != nil:
			if !errors.As(err, &we) || we.Type != want.Error.Type || we.Message != want.Error.Message {
				t.Fatalf("error reply %q: got %v, want %v", payload, err, want.Error)
			}
		default:
			if err != nil || ch.Text != want.Response || ch.Last != want.EndOfStream {
				t.Fatalf("reply %q: got %+v, %v; want chunk %q last=%v", payload, ch, err, want.Response, want.EndOfStream)
			}
			if want.EndOfStream {
				if _, err := c.Recv(ctx); !errors.Is(err, io.EOF) {
					t.Fatalf("after the last chunk: %v, want io.EOF", err)
				}
			}
		}
		c.Close()
		if n := b.pending.len(); n != 0 {
			t.Fatalf("%d entries left pending", n)
		}
	})
}
