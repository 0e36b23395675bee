package operations

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
)

// The sweep deletes operations that ended more than the TTL ago (a
// tombstone on the state topic) and leaves running ones alone.
func TestSweepDeletesExpired(t *testing.T) {
	t.Parallel()
	m, b := newTestManager(t, Options{TTL: time.Millisecond, SweepEvery: time.Millisecond})
	old := Record{ID: newID(), Owner: "alice", Tool: "echo", State: Done, EndMS: time.Now().Add(-time.Hour).UnixMilli()}
	if err := m.put(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	live := putRunning(t, m, "alice")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go m.sweep(ctx)
	eventually.True(t, 10*time.Second, "the expired operation deleted", func() bool { return m.Stats().Table == 1 })
	if _, err := m.Get("alice", live.ID); err != nil {
		t.Fatalf("the running operation: %v", err)
	}
	var tombstones int
	for _, msg := range b.published(DefaultStateTopic) {
		if msg.Key == old.ID && len(msg.Payload) == 0 {
			tombstones++
		}
	}
	if tombstones != 1 {
		t.Fatalf("%d tombstones of the expired operation, want 1", tombstones)
	}
}
