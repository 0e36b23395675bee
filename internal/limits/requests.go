package limits

import (
	"time"

	"github.com/toolgate/toolgate/internal/jsontext"
)

// Defaults of the request limits.
const (
	// DefaultMaxBody is the default bound of a request's body, and of
	// each message of it, counted after decompression: 1 MiB.
	DefaultMaxBody = 1 << 20
	// DefaultMaxHeaderBytes is the default bound of a request's header
	// lines (HTTP) or metadata (gRPC): 64 KiB.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultBodyTimeout is the default time a client has to send a
	// request's body (on gRPC: its first message).
	DefaultBodyTimeout = 30 * time.Second
	// MaxJSONDepth is how deeply a request's JSON — a REST or MCP body,
	// a call's arguments on any door — may nest. It is fixed: no tool's
	// arguments need more, and every decoder of the gateway stops there.
	MaxJSONDepth = jsontext.MaxDepth
)

// HardHeaderFactor is how much larger than Requests.MaxHeaderBytes a
// server's own header limit is (the http.Server's MaxHeaderBytes, gRPC's
// MaxHeaderListSize): below it a door refuses a request in its own error
// form; above it the server refuses it at the protocol level, without
// keeping the headers.
const HardHeaderFactor = 4

// Requests are the bounds of what one request may bring, the same on
// every door — gRPC, REST, MCP, Connect and gRPC-Web — and applied before
// any other work (HTTP wraps the HTTP listener, GRPCServerOptions and
// GRPCTap the gRPC server; the doors answer the refusals in their own
// error forms).
type Requests struct {
	// MaxBodyBytes bounds a request's body and each message of it,
	// counted after decompression, whatever the compressed size: a body
	// that inflates past it is refused once it has, without inflating
	// further (DefaultMaxBody when <= 0). JSON bodies and arguments are
	// bounded by it too.
	MaxBodyBytes int64
	// MaxHeaderBytes bounds a request's header lines or metadata
	// (DefaultMaxHeaderBytes when <= 0).
	MaxHeaderBytes int
	// BodyTimeout is the time a request's body has to arrive in full —
	// on gRPC, its first message — counted from its headers; <= 0: no
	// limit. Responses, streams of any length, are not limited.
	BodyTimeout time.Duration
	// HTTP2 bounds each HTTP/2 connection of both listeners: streams at
	// once, and the client's budgets of resets, pings and settings.
	HTTP2 HTTP2
}

// withDefaults fills the unset bounds with their defaults.
func (q Requests) withDefaults() Requests {
	if q.MaxBodyBytes <= 0 {
		q.MaxBodyBytes = DefaultMaxBody
	}
	if q.MaxHeaderBytes <= 0 {
		q.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	q.HTTP2 = q.HTTP2.withDefaults()
	return q
}

// Body is q's body bound, its default when unset.
func (q Requests) Body() int64 { return q.withDefaults().MaxBodyBytes }

// Header is q's header bound, its default when unset.
func (q Requests) Header() int { return q.withDefaults().MaxHeaderBytes }
