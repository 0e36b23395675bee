// Package telemetry makes the gateway observable: Prometheus metrics per
// call and for the bridge and registry, OpenTelemetry traces whose W3C
// trace context rides along in the Pulsar message properties, and one
// structured log line per call. It offers gRPC interceptors and a stats
// handler, a /metrics handler, and small helpers the bridge and the Go SDK
// call to pass the trace context on. It imports none of the gateway's other
// packages: what it reports about them comes through functions it is given.
package telemetry

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// named is a request message that names a tool (InvokeTool, StreamTool,
// GetTool).
type named interface{ GetName() string }

// toolOf returns the tool a request message names, "" for none.
func toolOf(req any) string {
	if n, ok := req.(named); ok {
		return n.GetName()
	}
	return ""
}

// codeOf is the gRPC code a handler's error becomes, as grpc-go decides
// it: a status keeps its code, context errors become Canceled or
// DeadlineExceeded, anything else Unknown.
func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Code()
	}
	return codes.Unknown
}

// firstMessageStream calls onFirst with the first request message a
// server stream receives, once, and can replace the stream's context. The
// handler may run RecvMsg on another goroutine than the interceptor, so
// onFirst must synchronize what it shares.
type firstMessageStream struct {
	grpc.ServerStream
	ctx     context.Context
	onFirst func(m any)
	once    sync.Once
}

func (s *firstMessageStream) Context() context.Context { return s.ctx }

func (s *firstMessageStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	// An interceptor between this one and the transport (auth) may refuse
	// a message it decoded: the message still names the tool.
	if err == nil || toolOf(m) != "" {
		s.once.Do(func() { s.onFirst(m) })
	}
	return err
}
