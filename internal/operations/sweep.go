package operations

// The TTL sweep: operations that ended more than Options.TTL ago are
// deleted from the table.

import (
	"context"
	"time"
)

func (m *Manager) sweep(ctx context.Context) {
	t := time.NewTicker(m.opts.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
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
