package corebackend

import (
	"errors"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/operations"
	"github.com/toolgate/toolgate/internal/toolcall"
)

// kinds matches the bridge's and the operations keeper's errors to the
// core's kinds of failure: an error is of every kind whose error it wraps
// (the bridge's ErrServiceBusy is an ErrOverloaded too, an
// InstanceLostError both an ErrInstanceLost and an ErrServiceGone), and
// the core picks among them as it maps them onto statuses.
var kinds = [...]struct {
	err  error
	kind toolcall.FailureKind
}{
	{bridge.ErrServiceBusy, toolcall.FailServiceBusy},
	{bridge.ErrOverloaded, toolcall.FailOverloaded},
	{bridge.ErrSlowReader, toolcall.FailSlowReader},
	{bridge.ErrLostReplies, toolcall.FailRepliesLost},
	{bridge.ErrBadReply, toolcall.FailBadReply},
	{bridge.ErrInstanceLost, toolcall.FailInstanceLost},
	{bridge.ErrServiceGone, toolcall.FailServiceGone},
	{bridge.ErrNoListener, toolcall.FailNoListener},
	{bridge.ErrClosed, toolcall.FailClosed},
	{bridge.ErrUnavailable, toolcall.FailBrokerUnavailable},
	{operations.ErrNotFound, toolcall.FailOperationNotFound},
	{operations.ErrTooMany, toolcall.FailTooManyOperations},
	{operations.ErrTooLong, toolcall.FailOperationTooLong},
	{operations.ErrNotReady, toolcall.FailOperationsNotReady},
	{operations.ErrNotSeen, toolcall.FailOperationNotSeen},
	{operations.ErrChunksLost, toolcall.FailChunksLost},
	{operations.ErrUnavailable, toolcall.FailChunksUnavailable},
}

// fail is err as the core reads it: a toolcall.Failure of the kinds it
// is, with what the bridge's errors tell of a lost instance or a service
// gone; err itself when it is of no kind (nil, a context's error, a tool
// service's, io.EOF).
func fail(err error) error {
	if err == nil {
		return nil
	}
	var (
		found [len(kinds)]toolcall.FailureKind
		n     int
	)
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			found[n] = k.kind
			n++
		}
	}
	if n == 0 {
		return err
	}
	f := toolcall.Fail(err, found[:n]...)
	if le := (*bridge.InstanceLostError)(nil); errors.As(err, &le) {
		f.InstanceLost = &toolcall.InstanceLost{Instance: le.Instance, Why: le.Why}
	}
	if ge := (*bridge.ServiceGoneError)(nil); errors.As(err, &ge) {
		f.ServiceGone = &toolcall.ServiceGone{Topic: ge.Topic, Why: ge.Why}
	}
	return f
}
