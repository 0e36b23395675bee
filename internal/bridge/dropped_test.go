package bridge_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
