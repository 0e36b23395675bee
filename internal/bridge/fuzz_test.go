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
// never panic, and the call must end with a chunk, a service error, a
// malformed-reply error, or keep waiting — nothing else.
func FuzzRoute(f *testing.F) {
	for _, s := range []string{
		`{"error": null, "response": "hi", "end_of_stream": true}`,
		`{"error": {"type": "x", "message": "y"}, "end_of_stream": true}`,
		`{"response": "part"}`, `not json`, `[]`, `{"response": 1}`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		m := transport.NewMem()
		b := New(m, Options{})
		defer b.Close()
		c := &Call{b: b, id: "fuzz", notify: make(chan struct{}, 1)}
		b.inFlight.Add(1)
		b.pending.store(c.id, c)
		b.route("t", transport.Message{Payload: payload, Properties: map[string]string{wire.PropID: "fuzz"}})
		b.route("t", transport.Message{Payload: payload, Properties: map[string]string{}}) // no id: an orphan
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		_, err := c.Recv(ctx)
		var we *wire.Error
		switch {
		case err == nil, errors.Is(err, io.EOF), errors.As(err, &we), errors.Is(err, ErrBadReply), errors.Is(err, context.DeadlineExceeded):
		default:
			t.Fatalf("unexpected outcome %v", err)
		}
		c.Close()
		if n := b.pending.len(); n != 0 {
			t.Fatalf("%d entries left pending", n)
		}
	})
}
