package operations

// What the doors ask of an operation once started: Get, List, Cancel,
// Delete, Wait.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// Get returns owner's operation id as it stands now. An id this
// deployment made a moment ago (Keys.madeHere) whose record the table
// has not read yet is ErrNotSeen, not ErrNotFound: the operation may
// exist, this gateway's copy of the table lagging behind.
func (m *Manager) Get(owner, id string) (Record, error) {
	r, ok, _ := m.lookup(id)
	now := time.Now()
	if !ok {
		if m.unseen(id, now) {
			return Record{}, ErrNotSeen
		}
		return Record{}, ErrNotFound
	}
	if r.Owner != owner || r.expired(now, m.opts.TTL) {
		return Record{}, ErrNotFound
	}
	return r, nil
}

// unseen reports whether id, which the table does not hold, may be an
// operation its table has not read yet: an id this deployment made less
// than unseenFor ago, not seen deleted.
func (m *Manager) unseen(id string, now time.Time) bool {
	made, here := m.opts.Keys.madeHere(id)
	if !here || now.Sub(made) >= unseenFor || made.Sub(now) > clockSlack {
		return false
	}
	return !m.deleted(id)
}

// deleted reports whether the table saw id deleted lately (gone).
func (m *Manager) deleted(id string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.gone[id]
	return ok
}

// List returns owner's operations sorted by id; done, when set, keeps
// only the finished (true) or running (false) ones.
func (m *Manager) List(owner string, done *bool) []Record {
	now := time.Now()
	var out []Record
	m.mu.RLock()
	for _, r := range m.table {
		if r.Owner != owner || r.expired(now, m.opts.TTL) {
			continue
		}
		if done != nil && r.Finished() != *done {
			continue
		}
		out = append(out, r)
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Cancel records owner's operation id as cancelled, unless it has ended,
// and tells its tool service (tell). While the broker is found away it
// is refused at once, and a cancel waiting for the broker ends when it is
// found away (BrokerDown).
func (m *Manager) Cancel(ctx context.Context, owner, id string) (Record, error) {
	r, err := m.Get(owner, id)
	if err != nil {
		return Record{}, err
	}
	sctx, done, err := m.step(ctx, time.Time{})
	if err != nil {
		return Record{}, err
	}
	defer done()
	if _, err := m.finish(sctx, id, Cancelled, "", &Failure{Reason: ReasonCancelled, Message: "the operation was cancelled"}, 0); err != nil {
		if cause := why(sctx); cause != nil {
			err = cause
		}
		return Record{}, err
	}
	got, err := m.Get(owner, id)
	if err == nil && !r.Finished() && got.State == Cancelled {
		m.tell(ctx, r)
	}
	return got, err
}

// Delete removes owner's operation id from the table; a running one's
// tool service is told (tell). While the broker is found away it is
// refused at once, as Cancel is.
func (m *Manager) Delete(ctx context.Context, owner, id string) error {
	r, err := m.Get(owner, id)
	if err != nil {
		return err
	}
	sctx, done, err := m.step(ctx, time.Time{})
	if err != nil {
		return err
	}
	defer done()
	if err := m.remove(sctx, id); err != nil {
		if cause := why(sctx); cause != nil {
			err = cause
		}
		return err
	}
	if !r.Finished() {
		m.tell(ctx, r)
	}
	return nil
}

// tell asks r's tool service to stop it, on the service's cancel topic
// (wire.CancelTopic) as the bridge does for a call given up: every
// instance of a Go SDK service reads it, and the one running the request
// of id r.ID ends its context. Services that do not read it run the
// request to its end; its reply is then dropped, the operation having
// ended. A record without a topic (written by an older gateway) is not
// told.
func (m *Manager) tell(ctx context.Context, r Record) {
	if r.Topic == "" {
		return
	}
	topic := wire.CancelTopic(r.Topic)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := m.bus.Publish(ctx, topic, transport.Message{Payload: []byte(wire.CreditCancel),
		Properties: map[string]string{wire.PropID: r.ID, wire.PropCredit: wire.CreditCancel}}); err != nil {
		m.log.Warn("cannot tell a tool service that an operation was cancelled", "cancel_topic", topic, "id", r.ID, "err", err)
		return
	}
	m.told.Add(1)
}

// Wait returns owner's operation id once it has ended, or as it stands
// when timeout passes or ctx ends.
func (m *Manager) Wait(ctx context.Context, owner, id string, timeout time.Duration) (Record, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		_, _, changed := m.lookup(id) // before the read: no change is missed
		r, err := m.Get(owner, id)
		if errors.Is(err, ErrNotSeen) {
			// Made here a moment ago: its record is on its way.
			select {
			case <-changed:
				continue
			case <-t.C:
				return m.Get(owner, id)
			case <-ctx.Done():
				return r, err
			}
		}
		if err != nil || r.Finished() {
			return r, err
		}
		// The deadline passing is written too (deadlineEnd): a change.
		select {
		case <-changed:
		case <-t.C:
			return m.Get(owner, id)
		case <-ctx.Done():
			return r, nil
		}
	}
}
