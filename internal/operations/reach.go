package operations

// Whether the broker takes messages, as the gateway's probe finds it: the
// steps of an operation that write to the broker (a start, a cancel, a
// delete) are refused at once while it does not, and those under way
// stop waiting for it, as the bridge's calls do.

import (
	"context"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
)

// reach ends, its cause why, when the broker is found away.
type reach struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newReach() *reach {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &reach{ctx: ctx, cancel: cancel}
}

// BrokerDown says that the broker does not take messages (cause: what
// the probe found): until BrokerUp, an operation's start, cancel and
// delete are refused at once with an error wrapping bridge.ErrBrokerDown,
// and those waiting for the broker's receipt of their record end with it.
// Replies and the operations' ends keep being recorded as the broker
// takes them.
func (m *Manager) BrokerDown(cause error) {
	m.reach.Load().cancel(fmt.Errorf("%w (%w)", bridge.ErrBrokerDown, cause))
}

// BrokerUp says that the broker takes messages again.
func (m *Manager) BrokerUp() {
	if cur := m.reach.Load(); cur.ctx.Err() != nil {
		m.reach.CompareAndSwap(cur, newReach())
	}
}

// step is the context a step that writes to the broker runs under: ctx,
// ended at deadline (when set), and when the broker is found away. It
// refuses at once while the broker is away. done releases it; why is
// what ended it (the deadline, the broker's absence, the caller's end),
// nil while it has not.
func (m *Manager) step(ctx context.Context, deadline time.Time) (sctx context.Context, done func(), err error) {
	r := m.reach.Load()
	if r.ctx.Err() != nil {
		return nil, nil, context.Cause(r.ctx)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(r.ctx, func() { cancel(context.Cause(r.ctx)) })
	dcancel := context.CancelFunc(func() {})
	if !deadline.IsZero() {
		sctx, dcancel = context.WithDeadline(sctx, deadline)
	}
	return sctx, func() { stop(); dcancel(); cancel(nil) }, nil
}

// why is what ended a step's context, nil while it has not ended.
func why(sctx context.Context) error {
	if sctx.Err() == nil {
		return nil
	}
	return context.Cause(sctx)
}
