// Package corebackend adapts what serves the core to the core's own types:
// the bridge (internal/bridge) as a toolcall.Bridge and the keeper of
// durable operations (internal/operations) as toolcall.Operations.
// internal/app wires them in; the core names no type of either, nor any
// of their errors: the adapters match those to the core's kinds of
// failure (failure.go).
package corebackend

import (
	"context"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/operations"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/wire"
)

// Bridge is b as the core's Bridge.
func Bridge(b *bridge.Bridge) toolcall.Bridge { return bridgeCalls{b} }

type bridgeCalls struct{ b *bridge.Bridge }

func (a bridgeCalls) Call(ctx context.Context, t toolcall.Target, req wire.Request, deadline time.Time, stream bool, as toolcall.Assertion) (toolcall.Reply, error) {
	c, err := a.b.Call(ctx, bridge.Target(t), req, bridge.CallOptions{Deadline: deadline, Stream: stream, ID: as.ID, Caller: as.Token})
	if err != nil {
		return nil, fail(err)
	}
	return reply{c}, nil // one pointer: no allocation for the interface
}

// reply is a bridge call as the core's Reply.
type reply struct{ c *bridge.Call }

func (r reply) Wait(ctx context.Context) (string, error) {
	text, err := r.c.Wait(ctx)
	return text, fail(err)
}

func (r reply) Recv(ctx context.Context, idle time.Duration, idleErr error) (string, bool, error) {
	var (
		ch  bridge.Chunk
		err error
	)
	if idle > 0 {
		ch, err = r.c.RecvIdle(ctx, idle, idleErr)
	} else {
		ch, err = r.c.Recv(ctx)
	}
	return ch.Text, ch.Last, fail(err)
}

func (r reply) Close() { r.c.Close() }

// Operations is m as the core's Operations.
func Operations(m *operations.Manager) toolcall.Operations { return manager{m} }

type manager struct{ m *operations.Manager }

func (a manager) Start(ctx context.Context, s toolcall.OperationStart) (toolcall.OperationRecord, error) {
	r, err := a.m.Start(ctx, operations.StartSpec{Owner: s.Owner, Tool: s.Tool, Target: bridge.Target(s.Target),
		Request: s.Request, Deadline: s.Deadline, Assert: s.Assert})
	return record(r), fail(err)
}

func (a manager) Get(owner, id string) (toolcall.OperationRecord, error) {
	r, err := a.m.Get(owner, id)
	return record(r), fail(err)
}

func (a manager) List(owner string, done *bool) []toolcall.OperationRecord {
	rs := a.m.List(owner, done)
	out := make([]toolcall.OperationRecord, len(rs))
	for i, r := range rs {
		out[i] = record(r)
	}
	return out
}

func (a manager) Cancel(ctx context.Context, owner, id string) (toolcall.OperationRecord, error) {
	r, err := a.m.Cancel(ctx, owner, id)
	return record(r), fail(err)
}

func (a manager) Delete(ctx context.Context, owner, id string) error {
	return fail(a.m.Delete(ctx, owner, id))
}

func (a manager) Wait(ctx context.Context, owner, id string, timeout time.Duration) (toolcall.OperationRecord, error) {
	r, err := a.m.Wait(ctx, owner, id, timeout)
	return record(r), fail(err)
}

func (a manager) Stream(ctx context.Context, owner, id string, from int, emit func(i int, text string, last bool) error) (toolcall.OperationRecord, error) {
	r, err := a.m.Stream(ctx, owner, id, from, emit)
	return record(r), fail(err)
}

// record is r as the core reads it.
func record(r operations.Record) toolcall.OperationRecord {
	out := toolcall.OperationRecord{ID: r.ID, Tool: r.Tool, State: state(r.State), Done: r.Finished(),
		Created: time.UnixMilli(r.CreateMS), Deadline: time.UnixMilli(r.DeadlineMS), Output: r.Output}
	if r.EndMS > 0 {
		out.Ended = time.UnixMilli(r.EndMS)
	}
	if f := r.Failure; f != nil {
		out.Failure = &toolcall.OperationFailure{Type: f.Type, Message: f.Message, Reason: f.Reason, Cause: cause(f)}
	}
	return out
}

// state is s as the core names it.
func state(s operations.State) string {
	switch s {
	case operations.Running:
		return toolcall.OperationRunning
	case operations.Done:
		return toolcall.OperationDone
	case operations.Failed:
		return toolcall.OperationFailed
	case operations.Cancelled:
		return toolcall.OperationCancelled
	}
	return string(s)
}

// cause is the error a call would have failed with for the keeper's
// reasons that are a call's too; nil for a tool service's error and the
// keeper's other reasons.
func cause(f *operations.Failure) error {
	switch f.Reason {
	case operations.ReasonDeadline:
		return context.DeadlineExceeded
	case operations.ReasonCancelled:
		return context.Canceled
	case operations.ReasonLost:
		return fail(fmt.Errorf("%w: %s", bridge.ErrLostReplies, f.Message))
	case operations.ReasonBadReply:
		return fail(bridge.ErrBadReply)
	}
	return nil
}
