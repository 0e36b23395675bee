package toolservice

import (
	"context"
	"errors"
	"hash/maphash"
	"testing"
	"time"
)

// A cancel can overtake its request (they travel on different topics):
// the call is then not started. A cancel for a running call ends its
// context with ErrCallerGone; old cancels for calls never seen go.
func TestCallsCancel(t *testing.T) {
	var c calls
	c.init()
	now := time.Now()
	if c.cancel("early", now) {
		t.Fatal("cancel of a call not running reported it running")
	}
	if c.start("early", func(error) {}) {
		t.Fatal("a call cancelled before it came was started")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	if !c.start("run", cancel) {
		t.Fatal("a call nobody cancelled was not started")
	}
	if !c.cancel("run", now) || !errors.Is(context.Cause(ctx), ErrCallerGone) {
		t.Fatalf("running call: cause %v, want ErrCallerGone", context.Cause(ctx))
	}
	c.end("run")
	for i := range 3 * cancelsMax * callShards {
		c.cancel(string(rune(i))+"x", now)
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].early)
	}
	if n > cancelsMax*callShards {
		t.Fatalf("%d early cancels kept, want at most %d", n, cancelsMax*callShards)
	}
	c.cancel("late", now.Add(cancelKeep+time.Minute)) // prunes its shard
	late := &c.shards[maphash.String(c.seed, "late")%callShards]
	if len(late.early) != 1 {
		t.Fatalf("%d cancels kept past cancelKeep", len(late.early)-1)
	}
}
