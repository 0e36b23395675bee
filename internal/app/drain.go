package app

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/toolcall"
)

// drain counts the calls running (invocations and streams, by every door)
// and, once the gateway is shutting down, refuses new ones with
// UNAVAILABLE and a RetryInfo (toolcall.ShuttingDown) while the listeners
// stay open: /readyz answers 503 and the calls in flight finish.
type drain struct {
	closing atomic.Bool
	running atomic.Int64
}

func (d *drain) middleware() toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			if c.Op != toolcall.OpInvoke && c.Op != toolcall.OpStream && c.Op != toolcall.OpStartTool {
				return next(ctx, c, emit) // lists and lookups: quick, served to the end
			}
			// Counted before closing is read: wait never misses a call
			// that got past the check.
			d.running.Add(1)
			defer d.running.Add(-1)
			if d.closing.Load() {
				return toolcall.Result{}, toolcall.ShuttingDown()
			}
			return next(ctx, c, emit)
		}
	}
}

// wait returns true once no call is running, false when ctx ends first.
func (d *drain) wait(ctx context.Context) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for d.running.Load() > 0 {
		select {
		case <-ctx.Done():
			return d.running.Load() == 0
		case <-t.C:
		}
	}
	return true
}
