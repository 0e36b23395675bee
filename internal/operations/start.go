package operations

// Starting an operation: its record written, its request published, the
// reply awaited on the service's response topic, its end recorded.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/wire"
)

// StartSpec is an operation to start: the request the core made of a
// call, and whose it is.
type StartSpec struct {
	Owner    string
	Tool     string
	Target   bridge.Target
	Request  wire.Request
	Deadline time.Time
	// Assert, when set, signs the caller assertion of the request
	// (wire.PropCaller), given its id.
	Assert func(id string) (string, error)
}

// Start records the operation as running, then publishes its request,
// both before the operation's deadline and while ctx lasts: the start of
// an operation is a call like any other. While the broker is found away
// (BrokerDown) it is refused at once with an error wrapping
// bridge.ErrBrokerDown; a record the broker has not taken when the
// deadline passes, when the broker is found away or when ctx ends fails
// the start with context.DeadlineExceeded, that error or ctx's. A start
// never answers an operation whose deadline has passed. An error from the
// bridge is returned as it is. The record of a start that failed is
// withdrawn (withdraw).
func (m *Manager) Start(ctx context.Context, s StartSpec) (Record, error) {
	if !m.caughtUp.Load() {
		return Record{}, ErrNotReady
	}
	if len(s.Owner) > maxOwnerBytes || len(s.Tool) > maxToolNameBytes {
		return Record{}, fmt.Errorf("%w: the caller's identity (%d bytes) or the tool's name (%d bytes) is over %d bytes",
			ErrTooLong, len(s.Owner), len(s.Tool), maxOwnerBytes)
	}
	now := time.Now()
	if n := m.running(s.Owner, now, m.opts.MaxPerOwner); n >= m.opts.MaxPerOwner {
		return Record{}, fmt.Errorf("%w: %d of at most %d", ErrTooMany, n, m.opts.MaxPerOwner)
	}
	sctx, done, err := m.step(ctx, s.Deadline)
	if err != nil {
		return Record{}, err
	}
	defer done()
	topic := s.Target.RequestTopic
	if m.opts.TopicAllowed != nil && m.opts.TopicAllowed(topic) != nil {
		topic = "" // every table would refuse the record: recorded without it
	}
	r := Record{ID: m.opts.Keys.newID(now), Owner: s.Owner, Tool: s.Tool, State: Running, CreateMS: now.UnixMilli(), DeadlineMS: s.Deadline.UnixMilli(), Topic: topic}
	if _, err := m.putBy(sctx, r, s.Deadline); err != nil {
		m.withdraw(r.ID)
		if cause := why(sctx); cause != nil {
			return Record{}, cause // the deadline, the broker found away, the caller gone
		}
		return Record{}, fmt.Errorf("%w: %w", bridge.ErrUnavailable, err)
	}
	if !time.Now().Before(s.Deadline) {
		m.withdraw(r.ID)
		return Record{}, context.DeadlineExceeded
	}
	var caller string
	if s.Assert != nil {
		if caller, err = s.Assert(r.ID); err != nil {
			m.withdraw(r.ID)
			return Record{}, err
		}
	}
	// The request outlives the caller's request: it is the operation's.
	call, err := m.calls.Call(context.WithoutCancel(ctx), s.Target, s.Request,
		bridge.CallOptions{Deadline: s.Deadline, ID: r.ID, ReplyTo: ReplyTopicOf(m.opts.ReplyTopic, m.opts.Keys.ID()), NoCredit: true, Detached: true, Caller: caller})
	if err != nil {
		m.withdraw(r.ID)
		return Record{}, err
	}
	if !time.Now().Before(s.Deadline) {
		// The publish took the operation's time: its request carries
		// the deadline, which its service honours.
		call.Close()
		m.withdraw(r.ID)
		return Record{}, context.DeadlineExceeded
	}
	m.started.Add(1)
	m.lmu.Lock()
	m.local[r.ID] = call
	m.lmu.Unlock()
	if cur, ok, _ := m.lookup(r.ID); !ok || cur.Finished() {
		call.Close() // finished elsewhere already: apply did not see the call
	}
	go m.await(r.ID, call)
	return r, nil
}

// withdraw deletes, in the background, the record of an operation whose
// start failed: the caller was not given it. A record the broker takes
// after all — it was handed to the client before the start gave up —
// comes before the deletion on the same topic; one that never reached it
// is deleted as harmlessly. Bounded by withdrawWait; a deletion the
// broker did not take leaves the record, shown failed once its deadline
// has passed.
func (m *Manager) withdraw(id string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), withdrawWait)
		defer cancel()
		if err := m.remove(ctx, id); err != nil {
			m.quiet.Warn("an operation that could not start stays in the table until its deadline", "id", id, "err", err)
		}
	}()
}

// await waits for the reply on the service's response topic (a service
// that ignores reply-to) and records it. Replies on the reply topic are
// the consumer's; once the table shows the operation finished, apply
// closes the call and await ends without recording.
func (m *Manager) await(id string, call *bridge.Call) {
	defer func() {
		m.lmu.Lock()
		delete(m.local, id)
		m.lmu.Unlock()
		call.Close()
	}()
	text, err := call.Wait(context.Background())
	var se *wire.Error
	switch {
	case err == nil:
		m.finishLogged(id, Done, text, nil)
	case errors.As(err, &se):
		m.finishLogged(id, Failed, "", &Failure{Type: se.Type, Message: se.Message})
	case errors.Is(err, bridge.ErrLostReplies):
		m.finishLogged(id, Failed, "", &Failure{Reason: ReasonLost, Message: err.Error()})
	case errors.Is(err, bridge.ErrBadReply):
		m.finishLogged(id, Failed, "", &Failure{Reason: ReasonBadReply, Message: "the tool service sent a malformed reply"})
	case errors.Is(err, context.DeadlineExceeded):
		// The deadline passed with no reply: this gateway writes the
		// failure, a moment later (a reply sent in time may be on its
		// way), and counts it if it was the end.
		r, ok, _ := m.lookup(id)
		if !ok || r.Finished() {
			return
		}
		t := time.NewTimer(time.Until(time.UnixMilli(r.DeadlineMS).Add(deadlineGrace)))
		defer t.Stop()
		for {
			cur, ok, changed := m.lookup(id)
			if !ok || cur.Finished() {
				return // a reply came after all, or a cancel
			}
			select {
			case <-changed:
				continue
			case <-t.C:
			}
			break
		}
		if m.deadlineEnd(context.Background(), id) {
			m.expired.Add(1)
		}
	}
}

// deadlineEnd writes the end of running operation id whose deadline has
// passed — failed, ReasonDeadline, ended at its deadline — and reports
// whether that is its end (no other end came first).
func (m *Manager) deadlineEnd(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, ok, _ := m.lookup(id)
	if !ok || r.Finished() || !r.pastDeadline(time.Now()) {
		return false
	}
	r.State, r.Failure, r.EndMS, r.Output, r.Chunks = Failed, deadlineFailure(), r.DeadlineMS, "", 0
	got, err := m.putBy(ctx, r, time.Time{})
	if err != nil {
		m.quiet.Warn("cannot record that an operation's deadline passed", "id", id, "err", err)
		return false
	}
	return got.Finished() && sameOutcome(got, r)
}

func (m *Manager) finishLogged(id string, st State, out string, f *Failure) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.finish(ctx, id, st, out, f, 0); err != nil {
		m.log.Warn("cannot record an operation's end", "id", id, "err", err)
	}
}

// finish records id's end unless it has ended already; chunks is how
// many chunks of the answer are on the chunk topic. It returns whether
// that is the operation's end: an end another gateway wrote first on
// the state topic stands (applyTo). The end is counted by the gateway
// whose end it is.
func (m *Manager) finish(ctx context.Context, id string, st State, out string, f *Failure, chunks int) (bool, error) {
	r, ok, _ := m.lookup(id)
	now := time.Now()
	if !ok || r.Finished() {
		return false, nil
	}
	if len(out) > m.opts.MaxOutput {
		st, out, f = Failed, "", &Failure{Reason: ReasonTooLarge, Message: fmt.Sprintf("the output is larger than the %d bytes an operation keeps", m.opts.MaxOutput)}
	}
	r.State, r.Output, r.Failure, r.EndMS, r.Chunks = st, out, f, now.UnixMilli(), chunks
	got, err := m.putBy(ctx, r, time.Time{})
	if err != nil {
		return false, err
	}
	if !got.Finished() || !sameOutcome(got, r) {
		return false, nil
	}
	switch st {
	case Done:
		m.done.Add(1)
	case Failed:
		m.failed.Add(1)
	case Cancelled:
		m.cancelled.Add(1)
	}
	return true, nil
}

// running counts owner's running operations. The count of records
// stored as running bounds it from above (a record past its deadline
// stays stored as running): only when that bound reaches max are the
// owner's records looked at one by one.
func (m *Manager) running(owner string, now time.Time, max int) int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if n := m.runningBy[owner]; n < max {
		return n
	}
	n := 0
	for _, r := range m.table {
		if r.Owner == owner && !r.Finished() && !r.pastDeadline(now) {
			n++
		}
	}
	return n
}
