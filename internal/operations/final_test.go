package operations

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// lastRecord is the record of the last message keyed id on topic, as a
// table reading the topic compacted (only the last message per key) gets
// it.
func lastRecord(t *testing.T, m *Manager, b *memBus, id string) *Record {
	t.Helper()
	var last *transport.Message
	for _, msg := range b.published(m.opts.StateTopic) {
		if msg.Key == id {
			msg := msg
			last = &msg
		}
	}
	if last == nil {
		t.Fatalf("no record of %s on the state topic", id)
	}
	r, ok := m.admit(*last)
	if !ok || r == nil {
		t.Fatalf("the last message of %s is not a record", id)
	}
	return r
}

// A replayed old record changes nothing: the running record of an
// operation done, published again after its end (a producer's retry of a
// message the broker had taken, or a party replaying it), leaves it done
// on the reader, and the gateway that wrote it writes the end again, so
// that the last record on the topic — what compaction keeps, and a
// gateway started later reads — is the end.
func TestReplayedRecordChangesNothing(t *testing.T) {
	t.Parallel()
	m, b := newTestManager(t, Options{Instance: "gw-a"})
	r := putRunning(t, m, "alice")
	var running transport.Message
	for _, msg := range b.published(m.opts.StateTopic) {
		if msg.Key == r.ID {
			running = msg
		}
	}
	if won, err := m.finish(t.Context(), r.ID, Done, "the answer", nil, 0); err != nil || !won {
		t.Fatalf("finish: %v %v", won, err)
	}
	if err := b.Publish(t.Context(), m.opts.StateTopic, running); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the end written again after the replay", func() bool {
		return m.repairs.Load() == 1 && lastRecord(t, m, b, r.ID).State == Done
	})
	if got, err := m.Get("alice", r.ID); err != nil || got.State != Done || got.Output != "the answer" {
		t.Fatalf("after the replay: %+v %v", got, err)
	}
	// A gateway reading the compacted topic later: the last record only.
	later, lb := newTestManager(t, Options{Keys: m.opts.Keys, Instance: "gw-c"})
	last := b.published(m.opts.StateTopic)
	if err := lb.Publish(t.Context(), later.opts.StateTopic, last[len(last)-1]); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the later gateway's table shows the operation done", func() bool {
		got, err := later.Get("alice", r.ID)
		return err == nil && got.State == Done
	})
	if m.repairs.Load() != 1 {
		t.Fatalf("%d repairs, want 1 (the end written again is no replay)", m.repairs.Load())
	}
}

// A reader whose table lags never shows an end the state topic does not
// give: a running operation past its deadline reads running until its end
// is written; the end written first stands on every reader, whatever
// comes later — done is never moved back to failed.
func TestAnEndIsFinal(t *testing.T) {
	t.Parallel()
	m, b := newTestManager(t, Options{Instance: "gw-a"})
	reader, rb := newTestManager(t, Options{Keys: m.opts.Keys, Instance: "gw-b"})
	copyTo := func() {
		for _, msg := range b.published(m.opts.StateTopic) {
			if err := rb.Publish(t.Context(), reader.opts.StateTopic, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := time.Now()
	r := Record{ID: m.opts.Keys.newID(now), Owner: "alice", Tool: "echo", State: Running, CreateMS: now.UnixMilli(), DeadlineMS: now.Add(-time.Second).UnixMilli()}
	if err := m.put(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if won, err := m.finish(t.Context(), r.ID, Done, "in time", nil, 0); err != nil || !won {
		t.Fatalf("finish: %v %v", won, err)
	}
	// Another gateway, its table lagging, writes the deadline's failure
	// after the end.
	late := r
	late.State, late.EndMS, late.Failure, late.Gateway, late.Version = Failed, r.DeadlineMS, deadlineFailure(), "gw-x", VersionEnded
	msg := transport.Message{Key: r.ID, Payload: mustJSON(t, late)}
	if err := m.opts.Keys.protect(kindRecord, &msg); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(t.Context(), m.opts.StateTopic, msg); err != nil {
		t.Fatal(err)
	}
	// The lagging reader has read nothing yet: unseen, then running past
	// its deadline — never failed by its own reckoning.
	if _, err := reader.Get("alice", r.ID); !errors.Is(err, ErrNotSeen) {
		t.Fatalf("before the reader read the record: %v, want ErrNotSeen", err)
	}
	if err := rb.Publish(t.Context(), reader.opts.StateTopic, b.published(m.opts.StateTopic)[0]); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the reader read the start", func() bool {
		got, err := reader.Get("alice", r.ID)
		return err == nil && got.State == Running
	})
	copyTo()
	eventually.True(t, 10*time.Second, "the reader read the end", func() bool {
		got, err := reader.Get("alice", r.ID)
		return err == nil && got.State == Done
	})
	for name, mm := range map[string]*Manager{"writer": m, "reader": reader} {
		eventually.True(t, 10*time.Second, name+": the table read the failure written late", func() bool { return mm.Stats().Table == 1 })
		if got, _ := mm.Get("alice", r.ID); got.State != Done || got.Output != "in time" {
			t.Fatalf("%s: after a failure written late: %+v", name, got)
		}
	}
	// The writer of the end it holds wrote it again over the late one.
	eventually.True(t, 10*time.Second, "the end last on the topic", func() bool { return lastRecord(t, m, b, r.ID).State == Done })
}

// The deadline's failure is written: by the starter a moment after the
// deadline, by any gateway once it passed orphanGrace ago (the starter
// gone). A reply sent after the deadline is dropped; one sent in time and
// delivered late (a broker restart) is recorded while no end is.
func TestDeadlinesWritten(t *testing.T) {
	t.Parallel()
	m, b := newTestManager(t, Options{Instance: "gw-a"})
	now := time.Now()
	put := func(deadline time.Time) Record {
		r := Record{ID: m.opts.Keys.newID(now), Owner: "alice", Tool: "echo", State: Running, CreateMS: now.Add(-time.Minute).UnixMilli(), DeadlineMS: deadline.UnixMilli()}
		if err := m.put(t.Context(), r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	orphan := put(now.Add(-orphanGrace - time.Second))
	recent := put(now.Add(-time.Second))
	m.orphans(t.Context())
	if got, _ := m.Get("alice", orphan.ID); got.State != Failed || got.Failure == nil || got.Failure.Reason != ReasonDeadline || got.EndMS != orphan.DeadlineMS {
		t.Fatalf("an orphan past its deadline: %+v", got)
	}
	if got, _ := m.Get("alice", recent.ID); got.State != Running {
		t.Fatalf("an operation whose starter may still write its end: %+v", got)
	}
	if st := m.Stats(); st.Failed != 0 || st.Expired != 0 {
		t.Fatalf("a deadline written by the sweep counted: %+v", st)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go m.consume(ctx)
	eventually.True(t, 10*time.Second, "the reply subscription attached", m.consumed.Load)
	sentLate := reply(recent.ID, 0, wire.Response{Response: "late", EndOfStream: true})
	sentLate.PublishTime = time.UnixMilli(recent.DeadlineMS).Add(time.Second)
	if !b.deliver(t, sentLate) {
		t.Fatal("a reply sent after the deadline handed back")
	}
	if got, _ := m.Get("alice", recent.ID); got.State != Running {
		t.Fatalf("a reply sent after the deadline recorded: %+v", got)
	}
	inTime := reply(recent.ID, 0, wire.Response{Response: "in time", EndOfStream: true})
	inTime.PublishTime = time.UnixMilli(recent.DeadlineMS).Add(-time.Second)
	if !b.deliver(t, inTime) {
		t.Fatal("a reply sent in time, delivered late, handed back")
	}
	if got, _ := m.Get("alice", recent.ID); got.State != Done || got.Output != "in time" {
		t.Fatalf("a reply sent in time, delivered after the deadline: %+v", got)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
