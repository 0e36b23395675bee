package toolcall

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The core notes in a call's Outcome whether its failure was the tool
// service's own error: an invoke's and a stream's, not the gateway's.
func TestOutcomeNotesServiceErrors(t *testing.T) {
	failing := wire.EncodeResponse(wire.Response{Error: &wire.Error{Type: "not-found", Message: "no such thing"}, EndOfStream: true})
	core := newCore(t, answering(failing), Options{})
	for _, op := range []Op{OpInvoke, OpStream} {
		ctx, o := WithOutcome(context.Background())
		_, err := core.Handle(ctx, &Call{Op: op, Name: "plain", Header: NoHeader}, func(Chunk) error { return nil })
		if status.Code(err) != codes.NotFound || !o.ServiceError() {
			t.Errorf("op %d, the service's error: %v, ServiceError %v; want NOT_FOUND, true", op, err, o.ServiceError())
		}
		ctx, o = WithOutcome(context.Background())
		_, err = core.Handle(ctx, &Call{Op: op, Name: "missing", Header: NoHeader}, func(Chunk) error { return nil })
		if status.Code(err) != codes.NotFound || o.ServiceError() {
			t.Errorf("op %d, an unknown tool: %v, ServiceError %v; want NOT_FOUND, false", op, err, o.ServiceError())
		}
	}
	ok := wire.EncodeResponse(wire.Response{Response: "fine", EndOfStream: true})
	core = newCore(t, answering(ok), Options{})
	ctx, o := WithOutcome(context.Background())
	if res, err := core.Handle(ctx, &Call{Op: OpInvoke, Name: "plain", Header: NoHeader}, nil); err != nil || res.Output != "fine" || o.ServiceError() {
		t.Errorf("answered: %q, %v, ServiceError %v", res.Output, err, o.ServiceError())
	}
}
