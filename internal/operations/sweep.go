package operations

// The TTL sweep: operations that ended more than Options.TTL ago are
// deleted from the table; and the deadlines of operations whose starter
// is gone are written.

import (
	"context"
	"time"
)

func (m *Manager) sweep(ctx context.Context) {
	t := time.NewTicker(m.opts.SweepEvery)
	defer t.Stop()
	dl := time.NewTicker(min(deadlineEvery, m.opts.SweepEvery))
	defer dl.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-dl.C:
			m.orphans(ctx)
			continue
		case <-t.C:
		}
		now := time.Now()
		var expired []string
		m.mu.Lock()
		for id, at := range m.gone {
			if now.Sub(at) > goneKept {
				delete(m.gone, id)
			}
		}
		m.mu.Unlock()
		m.mu.RLock()
		for id, r := range m.table {
			if r.expired(now, m.opts.TTL) {
				expired = append(expired, id)
			}
		}
		m.mu.RUnlock()
		for _, id := range expired {
			if err := m.remove(ctx, id); err != nil {
				m.log.Warn("cannot delete an expired operation", "id", id, "err", err)
				break
			}
		}
		if len(expired) > 0 {
			m.log.Debug("expired operations deleted", "count", len(expired))
		}
	}
}

// orphans writes the deadline failure of the running operations whose
// deadline passed more than orphanGrace ago: their starter, which writes
// it a moment after the deadline, is gone. Several gateways may write it;
// the first on the state topic is the end.
func (m *Manager) orphans(ctx context.Context) {
	now := time.Now()
	var due []string
	m.mu.RLock()
	for id, r := range m.table {
		if r.State == Running && now.UnixMilli() > r.DeadlineMS+orphanGrace.Milliseconds() {
			due = append(due, id)
		}
	}
	m.mu.RUnlock()
	for _, id := range due {
		if ctx.Err() != nil {
			return
		}
		m.deadlineEnd(ctx, id)
	}
}
