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
}

// Start records the operation as running, then publishes its request. An
// error from the bridge is returned as it is; the record is removed again.
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
	topic := s.Target.RequestTopic
	if m.opts.TopicAllowed != nil && m.opts.TopicAllowed(topic) != nil {
		topic = "" // every table would refuse the record: recorded without it
	}
	r := Record{ID: newID(), Owner: s.Owner, Tool: s.Tool, State: Running, CreateMS: now.UnixMilli(), DeadlineMS: s.Deadline.UnixMilli(), Topic: topic}
	if err := m.put(ctx, r); err != nil {
		return Record{}, fmt.Errorf("%w: %w", bridge.ErrUnavailable, err)
	}
	// The request outlives the caller's request: it is the operation's.
	call, err := m.calls.Call(context.WithoutCancel(ctx), s.Target, s.Request,
		bridge.CallOptions{Deadline: s.Deadline, ID: r.ID, ReplyTo: m.opts.ReplyTopic, NoCredit: true, Detached: true})
	if err != nil {
		if rerr := m.remove(context.WithoutCancel(ctx), r.ID); rerr != nil {
			m.log.Warn("an operation that could not start stays in the table until its deadline", "id", r.ID, "err", rerr)
		}
		return Record{}, err
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
		// The deadline passed with no reply: every table shows it failed
		// (Record.Now); the gateway that started it counts it.
		if r, ok, _ := m.lookup(id); ok && !r.Finished() {
			m.expired.Add(1)
		}
	}
}

func (m *Manager) finishLogged(id string, st State, out string, f *Failure) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.finish(ctx, id, st, out, f, 0); err != nil {
		m.log.Warn("cannot record an operation's end", "id", id, "err", err)
	}
}

// finish records id's end unless it has ended already; chunks is how
// many chunks of the answer are on the chunk topic.
func (m *Manager) finish(ctx context.Context, id string, st State, out string, f *Failure, chunks int) error {
	r, ok, _ := m.lookup(id)
	now := time.Now()
	if !ok || r.Now(now).Finished() {
		return nil
	}
	if len(out) > m.opts.MaxOutput {
		st, out, f = Failed, "", &Failure{Reason: ReasonTooLarge, Message: fmt.Sprintf("the output is larger than the %d bytes an operation keeps", m.opts.MaxOutput)}
	}
	r.State, r.Output, r.Failure, r.EndMS, r.Chunks = st, out, f, now.UnixMilli(), chunks
	if err := m.put(ctx, r); err != nil {
		return err
	}
	switch st {
	case Done:
		m.done.Add(1)
	case Failed:
		m.failed.Add(1)
	case Cancelled:
		m.cancelled.Add(1)
	}
	return nil
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
		if r.Owner == owner && !r.Now(now).Finished() {
			n++
		}
	}
	return n
}
