package toolcall

import (
	"context"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/wire"
)

// viaBridge is b as the core's Bridge, for the tests of this package
// (internal/corebackend, which the gateway uses, imports this package).
// It does not match the bridge's errors to the core's kinds of failure:
// internal/corebackend's tests hold that mapping to the statuses.
func viaBridge(b *bridge.Bridge) Bridge { return testBridge{b} }

type testBridge struct{ b *bridge.Bridge }

func (a testBridge) Call(ctx context.Context, t Target, req wire.Request, deadline time.Time, stream bool, as Assertion) (Reply, error) {
	c, err := a.b.Call(ctx, bridge.Target(t), req, bridge.CallOptions{Deadline: deadline, Stream: stream, ID: as.ID, Caller: as.Token})
	if err != nil {
		return nil, err
	}
	return testReply{c}, nil
}

type testReply struct{ c *bridge.Call }

func (r testReply) Wait(ctx context.Context) (string, error) { return r.c.Wait(ctx) }

func (r testReply) Recv(ctx context.Context, idle time.Duration, idleErr error) (string, bool, error) {
	var (
		ch  bridge.Chunk
		err error
	)
	if idle > 0 {
		ch, err = r.c.RecvIdle(ctx, idle, idleErr)
	} else {
		ch, err = r.c.Recv(ctx)
	}
	return ch.Text, ch.Last, err
}

func (r testReply) Close() { r.c.Close() }
