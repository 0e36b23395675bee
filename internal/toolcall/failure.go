package toolcall

import "errors"

// FailureKind is a way what serves the core (its Bridge, a Reply, its
// Operations) can fail that the core tells apart: the status a caller
// gets depends on it. A kind is an error, so that errors.Is(err, kind)
// asks whether err is of that kind. The core names no error of the
// packages behind it: internal/corebackend matches theirs to these
// (Fail), and toStatus and opError map the kinds onto statuses.
type FailureKind uint8

// The kinds of failure of a call and of a durable operation.
const (
	// FailServiceBusy: the tool's service has too many calls in flight
	// from this gateway.
	FailServiceBusy FailureKind = iota + 1
	// FailOverloaded: the gateway has too many calls in flight.
	FailOverloaded
	// FailSlowReader: the caller did not read a reply stream fast enough.
	FailSlowReader
	// FailRepliesLost: reply messages of the call were lost in transit;
	// the reply is incomplete.
	FailRepliesLost
	// FailBadReply: the tool service sent a reply that cannot be read.
	FailBadReply
	// FailInstanceLost: the instance that had taken the call is gone
	// (Failure.InstanceLost says which, when known).
	FailInstanceLost
	// FailServiceGone: the tool service stopped listening before it
	// answered (Failure.ServiceGone says where, when known).
	FailServiceGone
	// FailNoListener: no tool service listens on the request topic.
	FailNoListener
	// FailClosed: the gateway is shutting down.
	FailClosed
	// FailBrokerUnavailable: the message broker cannot be reached.
	FailBrokerUnavailable

	// FailOperationNotFound: the operation is not the caller's, or does
	// not exist.
	FailOperationNotFound
	// FailTooManyOperations: the caller has too many operations running.
	FailTooManyOperations
	// FailOperationTooLong: the operation is too large to be recorded.
	FailOperationTooLong
	// FailOperationsNotReady: the gateway has not read the operations
	// table yet.
	FailOperationsNotReady
	// FailOperationNotSeen: the operation was started by the deployment
	// a moment ago and this gateway's table has not read it yet (it may
	// exist: asked again shortly, it is found).
	FailOperationNotSeen
	// FailChunksLost: chunks of the operation's answer are missing.
	FailChunksLost
	// FailChunksUnavailable: the operation's chunks cannot be read.
	FailChunksUnavailable

	failureKinds // how many kinds there are, plus one
)

var failureKindNames = [failureKinds]string{
	FailServiceBusy:        "service busy",
	FailOverloaded:         "gateway overloaded",
	FailSlowReader:         "slow reader",
	FailRepliesLost:        "replies lost",
	FailBadReply:           "bad reply",
	FailInstanceLost:       "instance lost",
	FailServiceGone:        "service gone",
	FailNoListener:         "no listener",
	FailClosed:             "closed",
	FailBrokerUnavailable:  "broker unavailable",
	FailOperationNotFound:  "operation not found",
	FailTooManyOperations:  "too many operations",
	FailOperationTooLong:   "operation too long",
	FailOperationsNotReady: "operations not ready",
	FailOperationNotSeen:   "operation not seen yet",
	FailChunksLost:         "chunks lost",
	FailChunksUnavailable:  "chunks unavailable",
}

// Error names the kind.
func (k FailureKind) Error() string {
	if k > 0 && k < failureKinds {
		return failureKindNames[k]
	}
	return "unknown failure"
}

// FailureKinds lists every kind, in the order of the constants.
func FailureKinds() []FailureKind {
	out := make([]FailureKind, 0, failureKinds-1)
	for k := FailureKind(1); k < failureKinds; k++ {
		out = append(out, k)
	}
	return out
}

// Failure is an error of what serves the core with the kinds of failure it
// is: errors.Is(f, k) for each of them, and errors.Is and errors.As reach
// Err as well. Its text is Err's, which some statuses quote.
type Failure struct {
	// Err is the error as its package made it.
	Err error
	// InstanceLost, of a FailInstanceLost, names the instance and why it
	// is gone, when they are known.
	InstanceLost *InstanceLost
	// ServiceGone, of a FailServiceGone, says where and how the service
	// was found gone, when that is known.
	ServiceGone *ServiceGone

	kinds uint32
}

// InstanceLost is the instance that had taken a call and is gone, and why.
type InstanceLost struct {
	Instance, Why string
}

// ServiceGone is the request topic a call's service stopped listening on,
// and why it was found gone.
type ServiceGone struct {
	Topic, Why string
}

// Fail returns err as a Failure of the given kinds.
func Fail(err error, kinds ...FailureKind) *Failure {
	f := &Failure{Err: err}
	for _, k := range kinds {
		f.kinds |= 1 << k
	}
	return f
}

func (f *Failure) Error() string { return f.Err.Error() }

// Unwrap returns Err.
func (f *Failure) Unwrap() error { return f.Err }

// Is reports whether f is of the kind target (a FailureKind).
func (f *Failure) Is(target error) bool {
	k, ok := target.(FailureKind)
	return ok && f.kinds&(1<<k) != 0
}

// failureOf is the Failure in err's chain, or nil.
func failureOf(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	return nil
}
