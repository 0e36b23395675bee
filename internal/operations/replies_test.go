package operations

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// Replies reach their lanes through the one reply subscription: an answer
// in one message is recorded whole; one in several is kept chunk by chunk
// on the chunk topic and recorded with its chunk count.
func TestRepliesRecordedThroughTheLanes(t *testing.T) {
	t.Parallel()
	m, b := newTestManager(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go m.consume(ctx)
	eventually.True(t, 10*time.Second, "the reply subscription attached", m.consumed.Load)

	one := putRunning(t, m, "alice")
	if !b.deliver(t, reply(one.ID, -1, wire.Response{Response: "whole", EndOfStream: true})) {
		t.Fatal("a reply in one message not acknowledged")
	}
	if r, _ := m.Get("alice", one.ID); r.State != Done || r.Output != "whole" || r.Chunks != 0 {
		t.Fatalf("answered in one message: %+v", r)
	}

	several := putRunning(t, m, "alice")
	for i, part := range []wire.Response{{Response: "a"}, {Response: "b"}, {Response: "c", EndOfStream: true}} {
		if !b.deliver(t, reply(several.ID, i, part)) {
			t.Fatalf("reply %d not acknowledged", i)
		}
	}
	if r, _ := m.Get("alice", several.ID); r.State != Done || r.Output != "abc" || r.Chunks != 3 {
		t.Fatalf("answered in three messages: %+v", r)
	}
	if n := len(b.published(DefaultChunkTopic)); n != 3 {
		t.Fatalf("%d chunks kept, want 3", n)
	}

	if !b.deliver(t, reply("not-an-id", -1, wire.Response{EndOfStream: true})) {
		t.Fatal("a reply without a valid id not dropped")
	}
	cancel()
	eventually.True(t, 10*time.Second, "the reply subscription closed", func() bool { return !m.consumed.Load() })
}

// A lane checks the sequence of an operation's replies: a replay is
// acknowledged and ignored, a gap fails the operation, an error reply
// ends it with the service's error, and a malformed reply fails it.
func TestLaneChecksTheSequence(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{})
	lane := &replyLane{partial: map[string]*partial{}}
	on := func(msg transport.Message) {
		t.Helper()
		if !m.onReply(lane, msg) {
			t.Fatal("a reply handed back")
		}
	}
	get := func(id string) Record {
		t.Helper()
		r, err := m.Get("alice", id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	gap := putRunning(t, m, "alice")
	on(reply(gap.ID, 0, wire.Response{Response: "a"}))
	on(reply(gap.ID, 0, wire.Response{Response: "a"})) // a replay
	if r := get(gap.ID); r.State != Running {
		t.Fatalf("after a replay: %+v", r)
	}
	on(reply(gap.ID, 3, wire.Response{Response: "d"}))
	if r := get(gap.ID); r.State != Failed || r.Failure.Reason != ReasonLost || r.Chunks != 1 {
		t.Fatalf("after a gap: %+v", r)
	}
	if len(lane.partial) != 0 {
		t.Fatalf("the lane keeps %d partial answers after the end", len(lane.partial))
	}

	failed := putRunning(t, m, "alice")
	on(reply(failed.ID, -1, wire.Response{Error: &wire.Error{Type: "ValueError", Message: "no"}}))
	if r := get(failed.ID); r.State != Failed || r.Failure.Type != "ValueError" || r.Failure.Message != "no" {
		t.Fatalf("after an error reply: %+v", r)
	}

	bad := putRunning(t, m, "alice")
	on(transport.Message{Payload: []byte("{"), Properties: map[string]string{wire.PropID: bad.ID}})
	if r := get(bad.ID); r.State != Failed || r.Failure.Reason != ReasonBadReply {
		t.Fatalf("after a malformed reply: %+v", r)
	}

	ended := get(bad.ID)
	on(reply(ended.ID, -1, wire.Response{Response: "late", EndOfStream: true})) // dropped: it has ended
	if r := get(bad.ID); r.State != Failed {
		t.Fatalf("a reply after the end changed the record: %+v", r)
	}
}

// Every reply of one operation goes to one lane.
func TestLaneOfIsStable(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	for range 200 {
		id := newID()
		l := laneOf(id)
		if l < 0 || l >= replyLanes || laneOf(id) != l {
			t.Fatalf("laneOf(%s) = %d", id, l)
		}
		seen[l] = true
	}
	if len(seen) < 2 {
		t.Fatalf("200 ids all in %d lane(s)", len(seen))
	}
}
