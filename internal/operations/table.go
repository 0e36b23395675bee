package operations

// The state table: the follower that reads it to its end and then
// follows it, what it admits from the bus, and the writes of records and
// tombstones.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
)

func (m *Manager) follow(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		// A fresh read builds a fresh table, swapped in once caught up:
		// deletions missed meanwhile are not kept.
		building, counts, deleted := map[string]Record{}, map[string]int{}, map[string]time.Time{}
		live := false
		apply := func(msg transport.Message) {
			if live {
				if !msg.PublishTime.IsZero() {
					m.lag.Store(int64(time.Since(msg.PublishTime)))
				}
				m.apply(msg)
				return
			}
			if r, ok := m.admit(msg); ok {
				applyTo(building, counts, msg.Key, r)
				if r == nil && m.recent(msg.Key) {
					deleted[msg.Key] = time.Now()
				}
			}
		}
		err := m.bus.Follow(ctx, m.opts.StateTopic, "toolgate-operations-table", apply, func() {
			m.mu.Lock()
			m.table, m.runningBy = building, counts
			for id, at := range deleted {
				m.gone[id] = at
			}
			n := len(building) // the table is the calls' from here on
			m.notifyLocked()
			m.mu.Unlock()
			live = true
			if !m.caughtUp.Swap(true) {
				m.log.Info("operations table read", "topic", m.opts.StateTopic, "operations", n)
			}
			m.noteReady()
		})
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("reading the operations table failed; reading it again", "topic", m.opts.StateTopic, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// admit checks a message read from the state table, as anything from the
// bus: signed with one of the deployment's keys (and decrypted with it), a
// valid record (or a
// tombstone: a nil record), naming only an allowed topic. A message
// refused is counted and logged (refuse); ok is false then.
func (m *Manager) admit(msg transport.Message) (r *Record, ok bool) {
	plain, err := m.opts.Keys.unprotect(kindRecord, msg)
	if err != nil {
		m.refuseRead(m.opts.StateTopic, msg, err)
		return nil, false
	}
	if len(msg.Payload) == 0 {
		return nil, true
	}
	rec, err := decodeRecord(msg.Key, plain)
	if err != nil {
		m.refuse(RefusedMalformed, m.opts.StateTopic, msg.Key, err)
		return nil, false
	}
	if rec.Topic != "" && m.opts.TopicAllowed != nil {
		if err := m.opts.TopicAllowed(rec.Topic); err != nil {
			m.refuse(RefusedTopic, m.opts.StateTopic, msg.Key, err)
			return nil, false
		}
	}
	return &rec, true
}

// refuseRead refuses msg, read on topic, which unprotect refused with err;
// a message written with a key not held here names that key (Foreign).
func (m *Manager) refuseRead(topic string, msg transport.Message, err error) {
	m.refuse(refusedReason(err), topic, msg.Key, err)
	if errors.Is(err, errUnknownKey) {
		m.noteForeign(topic, msg.Properties[propKeyID])
	}
}

// refuse counts a message refused on topic for reason, and logs its
// cause: at debug level, and at warning level at most once every
// refusedWarnEvery.
func (m *Manager) refuse(reason, topic, key string, err error) {
	for i, r := range refusedReasons {
		if r == reason {
			m.refused[i].Add(1)
		}
	}
	if len(key) > 100 {
		key = key[:100] + "…"
	}
	m.log.Debug("operations: message refused", "topic", topic, "key", key, "reason", reason, "err", err)
	now, last := time.Now().UnixNano(), m.refusedWarn.Load()
	if now-last >= int64(refusedWarnEvery) && m.refusedWarn.CompareAndSwap(last, now) {
		m.log.Warn("operations: messages refused on the operations topics (counted in toolgate_operations_records_refused_total; each logged at debug level)",
			"topic", topic, "key", key, "reason", reason, "err", err)
	}
}

// applyTo applies one state table entry to t: the record r under key, or
// key's tombstone (r nil). A record replaces the one held only when its
// version is higher (Record.Version): the end of an operation is the
// first end the state topic gives it, on every reader alike — a reply
// recorded by a gateway whose table lagged (a cancel not seen yet, the
// operation's deadline failure written, another gateway's record of the
// same reply) changes nothing, nor does a running record after the end
// (written first, it is the older: a replay). stale reports a record
// that changed nothing and records something else than the one held
// (repair). running counts the records of t stored as running, per owner.
func applyTo(t map[string]Record, running map[string]int, key string, rec *Record) (held Record, ok, stale bool) {
	old, had := t[key]
	if rec == nil {
		delete(t, key)
		if had {
			countRunning(running, old, -1)
		}
		return Record{}, false, false
	}
	r := *rec
	if had && (r.version() < old.version() || r.version() == old.version() && old.Finished()) {
		return old, true, !sameOutcome(old, r)
	}
	if had {
		countRunning(running, old, -1)
	}
	t[r.ID] = r
	countRunning(running, r, 1)
	return r, true, false
}

// countRunning adds d to the count of r's owner when r is stored running.
func countRunning(running map[string]int, r Record, d int) {
	if r.State != Running {
		return
	}
	if n := running[r.Owner] + d; n > 0 {
		running[r.Owner] = n
	} else {
		delete(running, r.Owner)
	}
}

// apply applies a message read live from the state table, once admitted.
// A record that changed nothing, yet records something else than the
// table holds, is the last word on the topic for now: compaction would
// keep it, and a gateway reading the table after that would show it. So
// the gateway that wrote it (a replay of its own message, an end that
// lost to another), or the one that wrote the record held, writes the
// record held again (repair).
func (m *Manager) apply(msg transport.Message) {
	r, ok := m.admit(msg)
	if !ok {
		return
	}
	held, stale := m.applyEntry(msg.Key, r)
	if stale && (r.Gateway == m.opts.Instance || held.Gateway == m.opts.Instance) {
		m.repairs.Add(1)
		go m.repair(held)
	}
}

// repair writes r again, so that the last record of its operation on the
// state topic is the one every table holds.
func (m *Manager) repair(r Record) {
	ctx, cancel := context.WithTimeout(context.Background(), withdrawWait)
	defer cancel()
	if _, err := m.putBy(ctx, r, time.Time{}); err != nil {
		m.quiet.Warn("cannot write an operation's record again over an older one read after it", "id", r.ID, "err", err)
		return
	}
	m.log.Debug("an operation's record written again over an older one read after it", "id", r.ID, "state", r.State)
}

// applyEntry applies the record r under key, or key's tombstone (r nil),
// to the table: held is the record the table holds after it, stale
// reports a record that changed nothing and records something else (a
// record of an operation seen deleted a moment ago is one).
func (m *Manager) applyEntry(key string, rec *Record) (held Record, stale bool) {
	m.mu.Lock()
	if _, deleted := m.gone[key]; deleted && rec != nil {
		m.mu.Unlock()
		return Record{}, false // a replay of a deleted operation's record
	}
	r, ok, stale := applyTo(m.table, m.runningBy, key, rec)
	if rec == nil && m.recent(key) {
		m.gone[key] = time.Now()
	}
	m.notifyLocked()
	m.mu.Unlock()
	if !ok || r.Finished() {
		// Finished (or gone) elsewhere: the wait for its reply here is
		// over. The service is not told from here: a reply ended it, or
		// the gateway that cancelled or deleted it told the service.
		m.lmu.Lock()
		c := m.local[key]
		delete(m.local, key)
		m.lmu.Unlock()
		if c != nil {
			c.Drop()
		}
	}
	return r, stale
}

// recent reports whether id was made by this deployment less than
// unseenFor ago: only such ids are remembered deleted (gone), as only
// they could be taken for an operation not seen yet.
func (m *Manager) recent(id string) bool {
	made, here := m.opts.Keys.madeHere(id)
	return here && time.Since(made) < unseenFor
}

func (m *Manager) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// lookup returns the record of id and the channel closed on the next change.
func (m *Manager) lookup(id string) (Record, bool, <-chan struct{}) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.table[id]
	return r, ok, m.changed
}

// put writes r to the state table, encrypted and signed, waiting for the
// broker's receipt; a running record is applied here at once, an end
// once the table reads it (putBy).
func (m *Manager) put(ctx context.Context, r Record) error {
	_, err := m.putBy(ctx, r, time.Time{})
	return err
}

// putBy is put of a record that is not written once deadline has passed
// (zero: none): a message not handed to the broker's client by then is
// given up (transport.Message.Deadline). An end is not applied here
// before the table reads it from the state topic, where it may come after
// another end, which then stands: putBy waits for the table to show the
// operation ended (or gone), at most readBackWait, and returns the record
// the table holds then (the zero Record when it does not show an end in
// time).
func (m *Manager) putBy(ctx context.Context, r Record, deadline time.Time) (Record, error) {
	r.Gateway = m.opts.Instance
	r.Version = r.version()
	b, err := json.Marshal(r)
	if err != nil {
		return Record{}, err
	}
	msg := transport.Message{Key: r.ID, Payload: b, Deadline: deadline}
	if err := m.opts.Keys.protect(kindRecord, &msg); err != nil {
		return Record{}, err
	}
	if err := m.publish(ctx, m.opts.StateTopic, msg); err != nil {
		return Record{}, fmt.Errorf("recording operation %s: %w", r.ID, err)
	}
	if !r.Finished() {
		m.applyEntry(r.ID, &r)
		return r, nil
	}
	return m.readBack(ctx, r.ID), nil
}

// readBack waits, at most readBackWait or until ctx or Run ends, for
// the table to show operation id ended or gone, and returns its record
// then (the zero Record when it does not).
func (m *Manager) readBack(ctx context.Context, id string) Record {
	t := time.NewTimer(readBackWait)
	defer t.Stop()
	for {
		cur, ok, changed := m.lookup(id)
		if ok && cur.Finished() {
			return cur
		}
		if !ok && m.deleted(id) {
			return Record{}
		}
		select {
		case <-changed:
		case <-t.C:
			return Record{}
		case <-ctx.Done():
			return Record{}
		case <-m.stopped:
			return Record{}
		}
	}
}

// remove writes id's tombstone, signed.
func (m *Manager) remove(ctx context.Context, id string) error {
	msg := transport.Message{Key: id}
	if err := m.opts.Keys.protect(kindRecord, &msg); err != nil {
		return err
	}
	if err := m.publish(ctx, m.opts.StateTopic, msg); err != nil {
		return fmt.Errorf("deleting operation %s: %w", id, err)
	}
	m.applyEntry(id, nil)
	return nil
}
