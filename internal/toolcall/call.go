// Package toolcall is the gateway's door-neutral core: a Call — a tool
// invocation, a stream, or a look into the registry — as every front door
// (gRPC, REST, MCP, Connect) hands it over, the middleware that every call
// passes through (Middleware, written once over Call: authentication,
// authorization, limits, the call log, metrics, spans), and the Core that
// serves a call: registry lookup, argument checks on the arguments' JSON
// text, the deadline, the envelope handed to the bridge, and the one
// mapping of failures onto gRPC statuses.
//
// A door decodes its own wire format into a Call, runs the Handler it was
// given (the middleware chain around Core.Handle) and encodes the Result,
// the emitted Chunks or the status error in its own way. It knows nothing
// of Pulsar or of another door; this package knows nothing of any door.
package toolcall

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"time"

	"github.com/toolgate/toolgate/internal/registry"
)

// Op is what a call asks for.
type Op uint8

// The operations of the ToolService.
const (
	OpInvoke       Op = iota + 1 // run a tool, answer with its whole output
	OpStream                     // run a tool, emit its output chunk by chunk
	OpListTools                  // a page of the tools the caller may see
	OpGetTool                    // one tool
	OpListServices               // a page of the tool services
	OpGetService                 // one tool service
	// Durable operations (docs/operations.md): Name is the tool
	// (OpStartTool) or the operation id.
	OpStartTool       // run a tool as an operation, answer with it at once
	OpGetOperation    // one of the caller's operations
	OpListOperations  // a page of the caller's operations (Filter)
	OpCancelOperation // cancel one
	OpDeleteOperation // delete one
	OpWaitOperation   // one, once done or when Timeout passes
	// OpStreamOperation emits an operation's answer chunk by chunk from
	// chunk From, kept and live (REST's GET /v1/operations/{id}:stream).
	OpStreamOperation
)

// Method names of the ops: the gRPC full method names of the ToolService,
// which the call log, metrics and spans report whichever door a call came
// by (a door may prefix its own name, as MCP does: "mcp/InvokeTool").
const (
	MethodInvoke       = "/toolgate.v1.ToolService/InvokeTool"
	MethodStream       = "/toolgate.v1.ToolService/StreamTool"
	MethodListTools    = "/toolgate.v1.ToolService/ListTools"
	MethodGetTool      = "/toolgate.v1.ToolService/GetTool"
	MethodListServices = "/toolgate.v1.ToolService/ListToolServices"
	MethodGetService   = "/toolgate.v1.ToolService/GetToolService"
	MethodStartTool    = "/toolgate.v1.ToolService/StartTool"
	// The google.longrunning.Operations methods.
	MethodGetOperation    = "/google.longrunning.Operations/GetOperation"
	MethodListOperations  = "/google.longrunning.Operations/ListOperations"
	MethodCancelOperation = "/google.longrunning.Operations/CancelOperation"
	MethodDeleteOperation = "/google.longrunning.Operations/DeleteOperation"
	MethodWaitOperation   = "/google.longrunning.Operations/WaitOperation"
	// MethodStreamOperation has no gRPC method: REST serves it alone.
	MethodStreamOperation = "rest/StreamOperation"
)

// Method is op's ToolService method name.
func (op Op) Method() string {
	switch op {
	case OpInvoke:
		return MethodInvoke
	case OpStream:
		return MethodStream
	case OpListTools:
		return MethodListTools
	case OpGetTool:
		return MethodGetTool
	case OpListServices:
		return MethodListServices
	case OpGetService:
		return MethodGetService
	case OpStartTool:
		return MethodStartTool
	case OpGetOperation:
		return MethodGetOperation
	case OpListOperations:
		return MethodListOperations
	case OpCancelOperation:
		return MethodCancelOperation
	case OpDeleteOperation:
		return MethodDeleteOperation
	case OpWaitOperation:
		return MethodWaitOperation
	case OpStreamOperation:
		return MethodStreamOperation
	}
	return ""
}

// Header is a call's request metadata, read by lower-case name: the
// credentials (authorization, x-api-key), the request id (x-request-id)
// and the W3C trace context (traceparent, tracestate). http.Header
// satisfies it (package httpcall reads it faster); the gRPC door wraps
// the incoming metadata.
type Header interface {
	Values(key string) []string
}

// NoHeader is a Header without values.
var NoHeader Header = noHeader{}

type noHeader struct{}

func (noHeader) Values(string) []string { return nil }

// Caller is an authenticated caller: who the authentication middleware
// established a call comes from. A user name alone says little — every
// source of identities names its own users — so the caller is known by
// its Subject (source and name), or by the Principal an operator joined it
// to.
type Caller struct {
	// User is the name the caller's credential gives: the envelope's user
	// (unless As names another), and the name shown in logs.
	User string
	// Roles are the caller's roles, as its credential states them.
	Roles []string
	// Method says how the caller was authenticated: SourceAPIKey,
	// SourceJWT, SourceMTLS or SourceAnonymous.
	Method string
	// Issuer is the JWT's issuer (iss) when Method is SourceJWT; "" for a
	// token without one.
	Issuer string
	// As, when its Source is set, is the identity the operator joined the
	// caller's own to on purpose (the policy's identities): the caller
	// acts as As — its operations, its rate-limit bucket, the envelope's
	// user.
	As Subject
}

// HasRole reports whether the caller has role r.
func (c Caller) HasRole(r string) bool { return slices.Contains(c.Roles, r) }

// Call is one call as a door hands it over. The door fills in what the
// caller asked; the middleware adds the caller and the request id.
type Call struct {
	Op Op
	// Method names the call in logs, metrics and spans (default
	// Op.Method()).
	Method string
	// Name is the tool (OpInvoke, OpStream, OpGetTool) or the tool
	// service id (OpGetService).
	Name string
	// Set is the tool set the call is made in ("": the whole registry):
	// the MCP endpoint of a set names it, REST's ?set= and the tool-set
	// metadata key of every door (HeaderToolSet) otherwise. Within a set
	// a tool is known by the name the set shows; Core.ToolSets resolves it
	// to the registry's before the policy sees the call.
	Set string
	// Shown is the name the call's tool set shows its tool under, when
	// Core.ToolSets replaced Name with another, the registry's ("":
	// Name is the name the caller gave). What the caller is told names
	// the tool so (ShownName), never by the name the set hides.
	Shown string
	// Args are the arguments of OpInvoke and OpStream: JSON object text
	// exactly as the caller wrote it (nil or empty: none). The core checks
	// it against the tool and passes it on unchanged but for white space.
	Args []byte
	// ArgsCompact says Args came out of jsontext.Compact whole (a member
	// of a body the door compacted): a JSON object already checked for
	// syntax, UTF-8, depth and repeated keys, and without white space. The
	// core then checks it against the tool without reading it twice. A
	// door sets it only for text it compacted itself.
	ArgsCompact bool
	// Timeout is the deadline the caller asked for when TimeoutSet (a
	// context deadline may also bound the call); it must be positive.
	Timeout    time.Duration
	TimeoutSet bool
	// PageSize and PageToken page OpListTools and OpListServices.
	PageSize  int32
	PageToken string
	// Filter narrows OpListOperations: "", "done=true" or "done=false".
	Filter string
	// From is the first chunk OpStreamOperation emits (0: all).
	From int
	// Header is the request's metadata (never nil once a door built the
	// call: NoHeader).
	Header Header
	// TLS is the connection's TLS state when it came over TLS, for a
	// verified client certificate.
	TLS *tls.ConnectionState
	// Peer is the caller's network address, for the log; PeerAddr, when
	// Peer is empty, is that address unformatted (PeerName formats it).
	Peer     string
	PeerAddr net.Addr

	// Set by the middleware.

	// Caller is who the call comes from; Authenticated says whether the
	// authentication middleware established it.
	Caller        Caller
	Authenticated bool
	// RequestID identifies the call in the log and to the caller, who
	// hears it back as x-request-id.
	RequestID string
}

// PeerName is the caller's network address as text: Peer, else PeerAddr
// formatted ("" when neither is known).
func (c *Call) PeerName() string {
	if c.Peer == "" && c.PeerAddr != nil {
		return c.PeerAddr.String()
	}
	return c.Peer
}

// ShownName is the tool as the caller named it: the name its tool set
// shows (Shown), else Name. Refusals and errors name the tool so.
func (c *Call) ShownName() string {
	if c.Shown != "" {
		return c.Shown
	}
	return c.Name
}

// MethodName is c.Method, else the op's method.
func (c *Call) MethodName() string {
	if c.Method != "" {
		return c.Method
	}
	return c.Op.Method()
}

// Chunk is one piece of a streamed output.
type Chunk struct {
	Text  string
	Index int64
	Last  bool
}

// Emit receives a stream's chunks in order. An error ends the call with
// that error (the door's client went away).
type Emit func(Chunk) error

// Result is what a call answers, by op: Output (OpInvoke), Tools and
// NextPageToken (OpListTools), Tool (OpGetTool), Services and
// NextPageToken (OpListServices), Service (OpGetService). A stream's
// output goes to its Emit; its Result is empty. RegistryVersion is the
// version of the registry snapshot a registry answer comes from.
//
// All but Output are in Detail, which every op but OpInvoke and OpStream
// sets: a Result is three words, returned in registers through every
// middleware, so that a parked call's chain of frames stays small (a
// goroutine's stack, not its heap, is most of what a parked call costs).
type Result struct {
	Output string
	*Detail
}

// Details is r's Detail, or an empty one when r has none: what a door
// reads the answer of an op other than OpInvoke and OpStream from.
func (r Result) Details() *Detail {
	if r.Detail == nil {
		return &Detail{}
	}
	return r.Detail
}

// Detail is what the ops other than OpInvoke and OpStream answer (Result).
type Detail struct {
	Tools           []*registry.Tool
	Tool            *registry.Tool
	Services        []*registry.Service
	Service         *registry.Service
	NextPageToken   string
	RegistryVersion int64
	// Operation answers the operation ops but OpListOperations, whose
	// page is Operations (and NextPageToken); OpDeleteOperation answers
	// none.
	Operation  *Operation
	Operations []*Operation
}

// Operation is a durable operation as a door presents it.
type Operation struct {
	ID    string
	Tool  string
	State string // running, done, failed, cancelled
	Done  bool
	// Created, Ended (zero while running) and Deadline.
	Created, Ended, Deadline time.Time
	// Output when done without error; Err (a status error, the core's
	// one mapping) when failed or cancelled.
	Output string
	Err    error
}

// Handler serves a call. emit is nil but for OpStream and
// OpStreamOperation.
type Handler func(ctx context.Context, c *Call, emit Emit) (Result, error)

// Middleware wraps a Handler with what every call goes through.
type Middleware func(next Handler) Handler

// Chain wraps h in mws, the first the outermost.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			h = mws[i](h)
		}
	}
	return h
}
