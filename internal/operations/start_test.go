package operations

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/wire"
)

// A start whose request the bridge refuses leaves no record behind: the
// record written first is removed again, and the bridge's error is
// returned as it is. A topic the allow-list refuses is not recorded.
func TestStartUndoneWhenTheRequestIsRefused(t *testing.T) {
	t.Parallel()
	m, b := newTestManager(t, Options{TopicAllowed: func(string) error { return errors.New("not announced") }})
	_, err := m.Start(t.Context(), StartSpec{Owner: "alice", Tool: "echo",
		Target: bridge.Target{RequestTopic: wire.RequestTopic("echo")}, Deadline: time.Now().Add(time.Hour)})
	if !errors.Is(err, errRefused) {
		t.Fatalf("Start: %v, want the bridge's error", err)
	}
	// The record is withdrawn in the background.
	eventually.True(t, 10*time.Second, "the record and its tombstone on the state topic", func() bool {
		return len(b.published(DefaultStateTopic)) == 2
	})
	msgs := b.published(DefaultStateTopic)
	if len(msgs) != 2 || len(msgs[1].Payload) != 0 || msgs[0].Key != msgs[1].Key {
		t.Fatalf("the state topic holds %d messages, want a record and its tombstone", len(msgs))
	}
	plain, err := m.opts.Keys.unprotect(kindRecord, msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	var r Record
	if err := json.Unmarshal(plain, &r); err != nil {
		t.Fatal(err)
	}
	if r.State != Running || r.Owner != "alice" || r.Topic != "" {
		t.Fatalf("the record written: %+v, want running, alice's, without the refused topic", r)
	}
	if st := m.Stats(); st.Table != 0 || st.Started != 0 {
		t.Fatalf("after the refused start: %+v", st)
	}
}

// One caller's running operations are bounded; another caller's are not
// counted against it, nor are finished ones.
func TestStartBoundsOneCallersRunningOperations(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{MaxPerOwner: 2})
	a := putRunning(t, m, "alice")
	putRunning(t, m, "alice")
	putRunning(t, m, "bob")
	start := func(owner string) error {
		_, err := m.Start(t.Context(), StartSpec{Owner: owner, Tool: "echo", Deadline: time.Now().Add(time.Hour)})
		return err
	}
	if err := start("alice"); !errors.Is(err, ErrTooMany) {
		t.Fatalf("alice's third: %v, want ErrTooMany", err)
	}
	if err := start("bob"); !errors.Is(err, errRefused) {
		t.Fatalf("bob's second: %v, want it to reach the bridge", err)
	}
	if _, err := m.finish(t.Context(), a.ID, Done, "x", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := start("alice"); !errors.Is(err, errRefused) {
		t.Fatalf("alice's after one ended: %v, want it to reach the bridge", err)
	}
}

// finish records an end once: a second end of the same operation, and an
// output over MaxOutput, are not what the record shows.
func TestFinishRecordsOneEnd(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{MaxOutput: 4})
	r := putRunning(t, m, "alice")
	if _, err := m.finish(t.Context(), r.ID, Done, "too long", nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.finish(t.Context(), r.ID, Done, "ok", nil, 0); err != nil {
		t.Fatal(err)
	}
	got, err := m.Get("alice", r.ID)
	if err != nil || got.State != Failed || got.Failure == nil || got.Failure.Reason != ReasonTooLarge {
		t.Fatalf("after an output over the bound and a second end: %+v, %v", got, err)
	}
	if st := m.Stats(); st.Failed != 1 || st.Done != 0 {
		t.Fatalf("ends counted: %+v", st)
	}
}
