package limits

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // gzip messages, inflated within MaxRecvMsgSize
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"
)

// GRPCServerOptions are the gRPC server's options for q: each message
// bounded by MaxBodyBytes after decompression (grpc.MaxRecvMsgSize: a
// gzip message is inflated up to the bound and no further, and refused
// with RESOURCE_EXHAUSTED), the metadata bounded at the protocol level
// by HardHeaderFactor × MaxHeaderBytes (grpc.MaxHeaderListSize; GRPCTap
// refuses what is over MaxHeaderBytes, in a status), the streams a
// connection may have at once (HTTP2.MaxConcurrentStreams), and the
// interceptors that stop GRPCTap's body clock once a call's first message
// has arrived. Use them with GRPCTap.
func GRPCServerOptions(q Requests) []grpc.ServerOption {
	q = q.withDefaults()
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(q.MaxBodyBytes)),
		grpc.MaxHeaderListSize(uint32(HardHeaderFactor * q.MaxHeaderBytes)),
		grpc.ChainUnaryInterceptor(stopClockUnary),
		grpc.ChainStreamInterceptor(stopClockStream),
	}
	if n := q.HTTP2.Streams(); n > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(n))
	}
	return opts
}

// stopClockUnary stops a unary call's body clock: its handler runs once
// its message is read.
func stopClockUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if c, ok := ctx.Value(bodyClockKey{}).(*bodyClock); ok {
		c.stop()
	}
	return h(ctx, req)
}

// stopClockStream stops a stream's body clock: at once for a stream of
// the client's messages (they come when the client has them), after its
// request message for a server stream.
func stopClockStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	c, ok := ss.Context().Value(bodyClockKey{}).(*bodyClock)
	switch {
	case !ok:
	case info.IsClientStream:
		c.stop()
	default:
		ss = &firstMessage{ServerStream: ss, clock: c}
	}
	return h(srv, ss)
}

// GRPCTap is the gRPC server's tap handle for q, which runs before a
// call's stream is made, with next (nil: none) after its header check. It refuses metadata over
// MaxHeaderBytes with RESOURCE_EXHAUSTED (toolcall.HeadersTooLarge), and
// gives the call's first message BodyTimeout to arrive: a call still
// waiting for it then ends with DEADLINE_EXCEEDED, and the cause is
// logged. A call whose own deadline comes sooner needs no clock.
func GRPCTap(q Requests, log *slog.Logger, next tap.ServerInHandle) tap.ServerInHandle {
	q = q.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if n := metadataBytes(info.Header); n > q.MaxHeaderBytes {
			log.InfoContext(ctx, "call refused: metadata too large", "rpc", info.FullMethodName, "bytes", n, "limit", q.MaxHeaderBytes)
			return nil, toolcall.HeadersTooLarge(n, q.MaxHeaderBytes)
		}
		// The next handle first: a call it refuses is aborted at once, and
		// needs no clock (gRPC would not end its context).
		if next != nil {
			var err error
			if ctx, err = next(ctx, info); err != nil {
				return nil, err
			}
		}
		if d := q.BodyTimeout; d > 0 {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > d {
				ctx = startBodyClock(ctx, d, log, info.FullMethodName)
			}
		}
		return ctx, nil
	}
}

// metadataBytes counts metadata as HTTP/2 does for its header list
// limit: names, values and 32 bytes a field.
func metadataBytes(md metadata.MD) int {
	n := 0
	for k, vs := range md {
		for _, v := range vs {
			n += len(k) + len(v) + 32
		}
	}
	return n
}

type bodyClockKey struct{}

// bodyClock is a call's context while its first message is awaited.
// When the clock runs out it is cancelled, and says
// context.DeadlineExceeded: gRPC then ends the call's wait for its
// message, and answers DEADLINE_EXCEEDED.
type bodyClock struct {
	context.Context
	cancel context.CancelFunc
	timer  *time.Timer
	// unwatch ends the watch that stops the timer when the stream ends
	// before its first message (reset, cancelled, connection lost).
	unwatch func() bool
	fired   atomic.Bool
	// For the log line when the clock runs out.
	log    *slog.Logger
	method string
	limit  time.Duration
}

func startBodyClock(parent context.Context, d time.Duration, log *slog.Logger, method string) *bodyClock {
	c := &bodyClock{log: log, method: method, limit: d}
	c.Context, c.cancel = context.WithCancel(parent)
	c.timer = time.AfterFunc(d, c.fire)
	// A stream that ends without a message (a client's RST_STREAM, its
	// connection gone) cancels the parent: the clock goes with it, so a
	// reset stream holds no timer, and nothing is logged for it.
	c.unwatch = context.AfterFunc(c.Context, func() { c.timer.Stop() })
	return c
}

// stop stops the clock: the call's first message arrived.
func (c *bodyClock) stop() {
	c.timer.Stop()
	c.unwatch()
}

// fire ends the wait for the call's first message.
func (c *bodyClock) fire() {
	c.fired.Store(true)
	c.cancel()
	c.log.InfoContext(c, "call ended: request message not received in time", "rpc", c.method, "limit", c.limit)
}

// Err is context.DeadlineExceeded once the clock ran out.
func (c *bodyClock) Err() error {
	if c.fired.Load() {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

// Value finds the clock itself under bodyClockKey.
func (c *bodyClock) Value(key any) any {
	if _, ok := key.(bodyClockKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// firstMessage stops the clock when a server-streaming call's request
// message has been read.
type firstMessage struct {
	grpc.ServerStream
	clock *bodyClock
}

func (s *firstMessage) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	s.clock.stop()
	return err
}
