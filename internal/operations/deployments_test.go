package operations

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// recordingCaller keeps the options of the requests it is asked to
// publish, and refuses them.
type recordingCaller struct{ opts chan bridge.CallOptions }

func (c recordingCaller) Call(_ context.Context, _ bridge.Target, _ wire.Request, o bridge.CallOptions) (*bridge.Call, error) {
	c.opts <- o
	return nil, errRefused
}

// Each key has a reply topic of its own, named by its id: a request names
// the topic of the key its record is written with, and a gateway consumes
// the topics of every key it holds (the previous one's too, so that a
// rotation loses no reply), never another deployment's.
func TestReplyTopicsNamedByTheKeys(t *testing.T) {
	t.Parallel()
	old, next := testKeys(t, 1), testKeys(t, 2, bytesOf(1))
	if old.ID() == next.ID() || len(old.ID()) != 2*keyIDBytes {
		t.Fatalf("key ids %q and %q", old.ID(), next.ID())
	}
	if ids := next.IDs(); !slices.Equal(ids, []string{next.ID(), old.ID()}) {
		t.Fatalf("the rotated keys name %v", ids)
	}
	calls := recordingCaller{opts: make(chan bridge.CallOptions, 1)}
	m, err := New(newMemBus(), calls, Options{Keys: next, ReplyTopic: "persistent://tg/response/toolgate.operations"})
	if err != nil {
		t.Fatal(err)
	}
	m.caughtUp.Store(true)
	want := []string{"persistent://tg/response/toolgate.operations." + next.ID(), "persistent://tg/response/toolgate.operations." + old.ID()}
	if got := m.ReplyTopics(); !slices.Equal(got, want) {
		t.Fatalf("reply topics %v, want %v", got, want)
	}
	if _, err := m.Start(t.Context(), startSpec(time.Minute)); !errors.Is(err, errRefused) {
		t.Fatalf("start: %v", err)
	}
	if o := <-calls.opts; o.ReplyTo != want[0] {
		t.Fatalf("the request names reply-to %q, want %q", o.ReplyTo, want[0])
	}
	if !wire.ReplyToAllowed(want[0], wire.ResponseTopic("echo")) {
		t.Fatalf("a service would not answer on %s", want[0])
	}
}

func bytesOf(fill byte) []byte {
	b := make([]byte, MinKeyBytes)
	for i := range b {
		b[i] = fill
	}
	return b
}

// A message written with a key not held here is refused as unknown_key
// and its key reported (Foreign, Stats.ForeignKeys) — replicas that
// disagree on keys show — while one a key held here wrote is not.
func TestForeignKeysReported(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{})
	other := testKeys(t, 9)
	msg := transport.Message{Key: testID, Payload: []byte(`{"id":"` + testID + `","owner":"a","tool":"echo","state":"running"}`)}
	if err := other.protect(kindRecord, &msg); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.admit(msg); ok {
		t.Fatal("another deployment's record admitted")
	}
	if got := m.Foreign(); !slices.Equal(got, []string{other.ID()}) {
		t.Fatalf("foreign keys %v, want [%s]", got, other.ID())
	}
	if s := m.Stats(); s.ForeignKeys != 1 || s.Refused[RefusedUnknownKey] != 1 {
		t.Fatalf("stats: %d foreign keys, %d refused unknown_key", s.ForeignKeys, s.Refused[RefusedUnknownKey])
	}
	putRunning(t, m, "alice")
	if got := m.Foreign(); len(got) != 1 {
		t.Fatalf("foreign keys after a record of our own: %v", got)
	}
}

// An id says which deployment made it, and when: a GET of one this
// deployment made a moment ago that the table has not read yet is
// ErrNotSeen (an ErrNotReady: retried, not NOT_FOUND); one made by
// another deployment, of the older form, made long ago or deleted is
// ErrNotFound. Wait waits for such a record to come.
func TestGetOfAnOperationNotSeenYet(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{})
	now := time.Now()
	fresh := m.opts.Keys.newID(now)
	if !validID(fresh) || len(fresh) != idLen {
		t.Fatalf("id %q", fresh)
	}
	if _, err := m.Get("alice", fresh); !errors.Is(err, ErrNotSeen) || !errors.Is(err, ErrNotReady) {
		t.Fatalf("an id made here a moment ago, not read yet: %v", err)
	}
	for name, id := range map[string]string{
		"another deployment's": testKeys(t, 9).newID(now),
		"of the older form":    newID(),
		"made long ago":        m.opts.Keys.newID(now.Add(-unseenFor - time.Second)),
		"tag changed":          fresh[:idLen-1] + string("01"[(fresh[idLen-1]-'0'+1)%2]),
	} {
		if _, err := m.Get("alice", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
	deleted := m.opts.Keys.newID(now)
	if err := m.remove(t.Context(), deleted); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get("alice", deleted); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an id seen deleted: %v", err)
	}

	// Wait, asked before the record is read, answers once it is.
	got := make(chan Record, 1)
	go func() {
		r, _ := m.Wait(t.Context(), "alice", fresh, 10*time.Second)
		got <- r
	}()
	r := Record{ID: fresh, Owner: "alice", Tool: "echo", State: Running, CreateMS: now.UnixMilli(), DeadlineMS: now.Add(time.Hour).UnixMilli()}
	if err := m.put(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if _, err := m.finish(t.Context(), fresh, Done, "out", nil, 0); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.State != Done {
		t.Fatalf("Wait of a record not seen yet answered %+v", r)
	}
}

// A reply for an id no key held here made is dropped at once (it is
// another deployment's: its record cannot be read here); one for an id
// made here a moment ago whose record is not read yet is handed back.
func TestRepliesOfOtherDeploymentsNotTaken(t *testing.T) {
	t.Parallel()
	m, b := newTestManager(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go m.consume(ctx)
	eventually.True(t, 10*time.Second, "the reply subscription attached", m.consumed.Load)
	start := time.Now()
	if !b.deliver(t, reply(testKeys(t, 9).newID(time.Now()), -1, wire.Response{Response: "x", EndOfStream: true})) {
		t.Fatal("another deployment's reply handed back")
	}
	if time.Since(start) > lagWait/2 {
		t.Fatalf("another deployment's reply held %v", time.Since(start))
	}
	if b.deliver(t, reply(m.opts.Keys.newID(time.Now()), -1, wire.Response{Response: "x", EndOfStream: true})) {
		t.Fatal("a reply to an operation made here, not read yet, acknowledged")
	}
}

// During a rotation every record and chunk of an operation is written
// with the key it was started with, when held: a replica given only the
// old key reads the end a replica of the new key wrote of an operation it
// started; what the new key started is written with the new key.
func TestRecordsWrittenWithTheirOperationsKey(t *testing.T) {
	t.Parallel()
	old, next := testKeys(t, 1), testKeys(t, 2, bytesOf(1))
	now := time.Now()
	for name, c := range map[string]struct {
		id       string
		readable *Keys // the replica of the old key only: nil when it must not read it
	}{
		"started with the old key": {old.newID(now), old},
		"started with the new key": {next.newID(now), nil},
		"of the older form":        {newID(), nil},
	} {
		msg := transport.Message{Key: c.id, Payload: []byte(`{}`)}
		if err := next.protect(kindRecord, &msg); err != nil {
			t.Fatal(err)
		}
		if _, err := next.unprotect(kindRecord, msg); err != nil {
			t.Errorf("%s: the writer cannot read it: %v", name, err)
		}
		_, err := old.unprotect(kindRecord, msg)
		if c.readable != nil && err != nil {
			t.Errorf("%s: the replica of the old key cannot read it: %v", name, err)
		}
		if c.readable == nil && !errors.Is(err, errUnknownKey) {
			t.Errorf("%s: the replica of the old key: %v, want errUnknownKey", name, err)
		}
	}
}
