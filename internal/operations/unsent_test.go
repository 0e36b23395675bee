package operations

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
)

// stalledBus holds every publish until release is closed: a broker that
// went away.
type stalledBus struct {
	*memBus
	release chan struct{}
}

func (b *stalledBus) Publish(ctx context.Context, topic string, msg transport.Message) error {
	select {
	case <-b.release:
		return b.memBus.Publish(ctx, topic, msg)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unsent counts the records and chunks being written, the broker's
// receipt not come yet: what a gateway stopping with its broker away
// leaves unwritten.
func TestUnsentCountsWritesUnderWay(t *testing.T) {
	t.Parallel()
	bus := &stalledBus{memBus: newMemBus(), release: make(chan struct{})}
	m, err := New(bus, failingCaller{errRefused}, Options{Keys: testKeys(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	m.caughtUp.Store(true)
	now := time.Now()
	r := Record{ID: newID(), Owner: "alice", Tool: "echo", State: Running, CreateMS: now.UnixMilli(), DeadlineMS: now.Add(time.Hour).UnixMilli()}
	written := make(chan error, 3)
	go func() { written <- m.put(t.Context(), r) }()
	go func() { written <- m.writeChunk(t.Context(), r.ID, 0, "a", false) }()
	go func() { written <- m.remove(t.Context(), newID()) }()
	eventually.True(t, 10*time.Second, "three writes under way", func() bool { return m.Unsent() == 3 })
	close(bus.release)
	for range 3 {
		if err := <-written; err != nil {
			t.Fatal(err)
		}
	}
	if n := m.Unsent(); n != 0 {
		t.Fatalf("Unsent %d once every write was taken, want 0", n)
	}
}
