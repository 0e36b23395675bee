package operations

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
)

// The follower builds the table from what the state topic holds, swaps it
// in once caught up (the Manager is ready to start operations only then),
// applies what comes live, and refuses what is not signed.
func TestFollowerReadsTheTableThenFollowsIt(t *testing.T) {
	t.Parallel()
	writer, b := newTestManager(t, Options{Instance: "writer"})
	kept := putRunning(t, writer, "alice")
	gone := putRunning(t, writer, "alice")
	if err := writer.remove(t.Context(), gone.ID); err != nil {
		t.Fatal(err)
	}
	_ = b.Publish(t.Context(), DefaultStateTopic, transport.Message{Key: testID, Payload: []byte(`{}`)}) // unsigned
	b.failFollow = errors.New("the broker is away")                                                      // the first read fails: read again

	m, err := New(b, failingCaller{errRefused}, Options{Keys: testKeys(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(t.Context(), StartSpec{Owner: "alice", Tool: "echo"}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Start before the table is read: %v, want ErrNotReady", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go m.follow(ctx)
	eventually.True(t, 10*time.Second, "the table read", m.caughtUp.Load)

	if r, err := m.Get("alice", kept.ID); err != nil || r.State != Running || r.Gateway != "writer" {
		t.Fatalf("the record kept: %+v, %v", r, err)
	}
	if _, err := m.Get("alice", gone.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the record deleted: %v, want ErrNotFound", err)
	}
	if _, err := m.Get("bob", kept.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another's record: %v, want ErrNotFound", err)
	}
	if got := m.Stats().Refused[RefusedUnsigned]; got != 1 {
		t.Fatalf("%d unsigned messages refused, want 1", got)
	}

	// Live: an end written elsewhere, then the tombstone.
	if _, err := writer.finish(t.Context(), kept.ID, Done, "hi", nil, 0); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the end applied", func() bool {
		r, err := m.Get("alice", kept.ID)
		return err == nil && r.State == Done && r.Output == "hi"
	})
	if err := writer.remove(t.Context(), kept.ID); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the tombstone applied", func() bool { return m.Stats().Table == 0 })
}
