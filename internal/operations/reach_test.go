package operations

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/wire"
)

var errProbe = errors.New("the broker did not acknowledge a probe message within 1s")

// startSpec is a start of alice's echo, its deadline d from now.
func startSpec(d time.Duration) StartSpec {
	return StartSpec{Owner: "alice", Tool: "echo", Target: bridge.Target{RequestTopic: wire.RequestTopic("echo")}, Deadline: time.Now().Add(d)}
}

// While the broker is found away an operation's start, cancel and delete
// are refused at once, as the bridge refuses calls, and nothing is
// written; once it is back they are served again.
func TestRefusedWhileTheBrokerIsAway(t *testing.T) {
	t.Parallel()
	m, b := newTestManager(t, Options{})
	r := putRunning(t, m, "alice")
	m.BrokerDown(errProbe)
	before := len(b.published(DefaultStateTopic))
	if _, err := m.Start(t.Context(), startSpec(time.Hour)); !errors.Is(err, bridge.ErrBrokerDown) || !errors.Is(err, bridge.ErrUnavailable) || !errors.Is(err, errProbe) {
		t.Fatalf("Start with the broker away: %v, want bridge.ErrBrokerDown with the probe's finding", err)
	}
	if _, err := m.Cancel(t.Context(), "alice", r.ID); !errors.Is(err, bridge.ErrBrokerDown) {
		t.Fatalf("Cancel with the broker away: %v, want bridge.ErrBrokerDown", err)
	}
	if err := m.Delete(t.Context(), "alice", r.ID); !errors.Is(err, bridge.ErrBrokerDown) {
		t.Fatalf("Delete with the broker away: %v, want bridge.ErrBrokerDown", err)
	}
	if n := len(b.published(DefaultStateTopic)); n != before {
		t.Fatalf("%d messages written with the broker away", n-before)
	}
	if got, err := m.Get("alice", r.ID); err != nil || got.State != Running {
		t.Fatalf("the operation after a refused cancel and delete: %+v, %v", got, err)
	}
	m.BrokerDown(errors.New("found away again")) // the first finding stays
	m.BrokerUp()
	if _, err := m.Start(t.Context(), startSpec(time.Hour)); !errors.Is(err, errRefused) {
		t.Fatalf("Start with the broker back: %v, want it to reach the bridge", err)
	}
	if got, err := m.Cancel(t.Context(), "alice", r.ID); err != nil || got.State != Cancelled {
		t.Fatalf("Cancel with the broker back: %+v, %v", got, err)
	}
}

// A start whose record the broker does not take ends at the operation's
// deadline with context.DeadlineExceeded, never later and never with the
// operation; its record is withdrawn once the broker takes messages.
func TestStartEndsAtItsDeadline(t *testing.T) {
	t.Parallel()
	bus := &stalledBus{memBus: newMemBus(), release: make(chan struct{})}
	m, err := New(bus, failingCaller{errRefused}, Options{Keys: testKeys(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	m.caughtUp.Store(true)
	const deadline = 300 * time.Millisecond
	spec := startSpec(deadline)
	type started struct {
		r   Record
		err error
	}
	ended := make(chan started, 1)
	go func() {
		r, err := m.Start(t.Context(), spec)
		ended <- started{r, err}
	}()
	var r Record
	select {
	case s := <-ended:
		r, err = s.r, s.err
	case <-time.After(10 * time.Second):
		close(bus.release)
		t.Fatalf("Start still waiting for the broker's receipt 10 s after it was made, its deadline %v", deadline)
	}
	took := time.Since(spec.Deadline.Add(-deadline))
	if !errors.Is(err, context.DeadlineExceeded) || r.ID != "" {
		t.Fatalf("Start with the record's receipt never coming: %+v, %v, want context.DeadlineExceeded", r, err)
	}
	if took < deadline || took > deadline+200*time.Millisecond {
		t.Fatalf("Start answered %v after it was made, want at its deadline (%v)", took, deadline)
	}
	eventually.True(t, 10*time.Second, "the record's withdrawal under way", func() bool { return m.Unsent() == 1 })
	close(bus.release)
	eventually.True(t, 10*time.Second, "the record withdrawn", func() bool {
		msgs := bus.published(DefaultStateTopic)
		return len(msgs) == 1 && len(msgs[0].Payload) == 0
	})
	if st := m.Stats(); st.Started != 0 || st.Table != 0 {
		t.Fatalf("after a start that failed: %+v", st)
	}
}

// A start waiting for the broker's receipt of its record ends as soon as
// the broker is found away, long before its deadline.
func TestStartUnderWayEndsWhenTheBrokerIsFoundAway(t *testing.T) {
	t.Parallel()
	bus := &stalledBus{memBus: newMemBus(), release: make(chan struct{})}
	defer close(bus.release)
	m, err := New(bus, failingCaller{errRefused}, Options{Keys: testKeys(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	m.caughtUp.Store(true)
	ended := make(chan error, 1)
	go func() {
		_, err := m.Start(t.Context(), startSpec(time.Hour))
		ended <- err
	}()
	eventually.True(t, 10*time.Second, "the record being written", func() bool { return m.Unsent() == 1 })
	found := time.Now()
	m.BrokerDown(errProbe)
	select {
	case err := <-ended:
		if !errors.Is(err, bridge.ErrBrokerDown) {
			t.Fatalf("Start: %v, want bridge.ErrBrokerDown", err)
		}
		t.Logf("Start ended %v after the broker was found away", time.Since(found).Round(time.Microsecond))
	case <-time.After(10 * time.Second):
		t.Fatal("Start still waiting for the broker 10 s after it was found away")
	}
}
