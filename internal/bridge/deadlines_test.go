package bridge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// The deadlines file calls by tick, take one out from anywhere in its
// tick, and hand over those of the ticks that came, each once; a call
// whose tick was swept already goes under the next one.
func TestDeadlinesFileAndDue(t *testing.T) {
	t.Parallel()
	var d deadlines
	d.init()
	base := time.Unix(1_000_000, 0)
	k := tickOf(base)
	at := func(ticks int64) *Call { return &Call{deadline: base.Add(time.Duration(ticks) * deadlineTick)} }
	a, b, c, e := at(0), at(0), at(0), at(2)
	for _, x := range []*Call{a, b, c, e} {
		d.file(x)
	}
	d.unfile(a) // the first of three: a nil in its place, the others stay
	d.unfile(a) // twice: nothing
	dl := &d.w[dlWheel]
	if tk := dl.ticks[k]; dl.n != 3 || tk.live != 2 || tk.calls[0] != nil || c.dl.pos != 2 {
		t.Fatalf("after unfiling one: n %d, tick %v (%d live), c at %d", dl.n, tk.calls, tk.live, c.dl.pos)
	}
	if got, _ := d.due(k-1, nil, nil); len(got) != 0 {
		t.Fatalf("due before their tick: %d", len(got))
	}
	got, _ := d.due(k, nil, nil)
	if len(got) != 2 || got[0] == got[1] || (got[0] != b && got[0] != c) || (got[1] != b && got[1] != c) || b.dl.tick() != 0 || c.dl.tick() != 0 {
		t.Fatalf("due at their tick: %v", got)
	}
	d.unfile(b) // taken out already: nothing
	// A tick whose calls are all taken out stays, and is filed in again
	// from its first place.
	f, g := at(5), at(5)
	d.file(f)
	d.file(g)
	d.unfile(g)
	d.unfile(f)
	if tk := dl.ticks[k+5]; tk == nil || len(tk.calls) != 0 || dl.n != 1 {
		t.Fatalf("a tick emptied by unfiling: %v, n %d", tk, dl.n)
	}
	d.file(g)
	if g.dl.pos != 0 || g.dl.tick() != k+5 {
		t.Fatalf("filed again at %d under %d", g.dl.pos, g.dl.tick())
	}
	d.unfile(g)
	late := &Call{deadline: base.Add(-time.Hour)}
	d.file(late)
	if late.dl.tick() != k+1 {
		t.Fatalf("a call past its deadline filed under tick %d, want the next to sweep, %d", late.dl.tick(), k+1)
	}
	// After a long wait the filed ticks are looked at, not every tick;
	// the empty one goes too.
	if got, _ := d.due(k+1_000_000, nil, nil); len(got) != 2 || dl.n != 0 || len(dl.ticks) != 0 {
		t.Fatalf("after a long wait: %d due, %d left in %d ticks", len(got), dl.n, len(dl.ticks))
	}
}

// A call nobody answers ends at its own deadline even while nobody waits
// for it, and leaves nothing filed; the bridge's goroutine then rests.
func TestCallEndsAtItsDeadlineUnread(t *testing.T) {
	t.Parallel()
	br := transport.NewMem()
	t.Cleanup(br.Close)
	b := New(br, Options{})
	t.Cleanup(b.Close)
	target := Target{RequestTopic: wire.RequestTopic("unread"), ResponseTopic: wire.ResponseTopic("unread")}
	start := time.Now()
	c, err := b.Call(t.Context(), target, wire.Request{}, CallOptions{Deadline: start.Add(30 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually.True(t, 10*time.Second, "the call ended at its deadline", func() bool { return b.Stats().InFlight == 0 })
	if time.Now().Before(start.Add(30 * time.Millisecond)) {
		t.Fatal("the call ended before its deadline")
	}
	if _, err := c.Recv(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv after the deadline: %v", err)
	}
	b.deadlines.mu.Lock()
	n, ticks := b.deadlines.w[dlWheel].n, len(b.deadlines.w[dlWheel].ticks)
	b.deadlines.mu.Unlock()
	if n != 0 || ticks != 0 {
		t.Fatalf("%d calls in %d ticks still filed", n, ticks)
	}
	// A call that ends first is taken out at once.
	c2, err := b.Call(t.Context(), target, wire.Request{}, CallOptions{Deadline: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	b.deadlines.mu.Lock()
	n = b.deadlines.w[dlWheel].n
	b.deadlines.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d calls filed after the only one was closed", n)
	}
}
