package toolcall

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Snapshots gives the current registry snapshot.
type Snapshots interface {
	Snapshot() *registry.Snapshot
}

// Defaults of Options.
const (
	DefaultTimeout    = 30 * time.Second
	DefaultMaxTimeout = 10 * time.Minute
	DefaultUser       = "anonymous"
	// DefaultPageSize and MaxPageSize bound a page of a list.
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// Options tune the Core.
type Options struct {
	// DefaultTimeout applies when neither the caller nor the tool service
	// sets one (DefaultTimeout).
	DefaultTimeout time.Duration
	// MaxTimeout caps any deadline a caller asks for (DefaultMaxTimeout).
	MaxTimeout time.Duration
	// StreamIdleTimeout ends a stream whose next chunk takes longer than
	// this (0: only the call's deadline applies).
	StreamIdleTimeout time.Duration
	// DefaultUser is the envelope's user when the call has no
	// authenticated caller (DefaultUser).
	DefaultUser string
	// Logger (default: discard).
	Logger *slog.Logger
	// Visible, when set, hides from the lists the tools a call's caller
	// may not list; the authorization middleware enforces calls.
	Visible func(c *Call, tool string) bool
	// Operations, when set, serves the operation ops (durable operations);
	// without it they answer UNIMPLEMENTED.
	Operations Operations
	// Callers, when set, signs a caller assertion for every call's
	// request (caller.go).
	Callers CallerSigner
}

// Core serves calls: the last Handler of every chain.
type Core struct {
	reg    Snapshots
	bridge Bridge
	opts   Options
	log    *slog.Logger
}

// New returns a Core over the registry's snapshots and the bridge.
func New(reg Snapshots, b Bridge, opts Options) *Core {
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = DefaultTimeout
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = DefaultMaxTimeout
	}
	if opts.DefaultUser == "" {
		opts.DefaultUser = DefaultUser
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Core{reg: reg, bridge: b, opts: opts, log: opts.Logger}
}

// Handle serves c. It is a Handler.
func (s *Core) Handle(ctx context.Context, c *Call, emit Emit) (Result, error) {
	switch c.Op {
	case OpInvoke:
		out, err := s.invoke(ctx, c)
		return Result{Output: out}, err
	case OpStream:
		if emit == nil {
			return Result{}, status.Error(codes.Internal, "a stream needs somewhere to send its chunks")
		}
		return Result{}, s.stream(ctx, c, emit)
	case OpListTools:
		return s.listTools(c)
	case OpGetTool:
		snap := s.reg.Snapshot()
		t, ok := snap.Tool(c.Name)
		if !ok {
			return Result{}, toolNotFound(c.ShownName())
		}
		set, err := inSet(snap, c)
		if err != nil {
			return Result{}, err
		}
		if set != nil {
			if t, ok = set.Shown(c.Name); !ok {
				return Result{}, toolNotFound(c.ShownName())
			}
		}
		return Result{Detail: &Detail{Tool: t, RegistryVersion: snap.Version}}, nil
	case OpListServices:
		snap := s.reg.Snapshot()
		svcs := snap.Services()
		start, end, next, err := page(len(svcs), func(i int) string { return svcs[i].ID }, c.PageSize, c.PageToken)
		if err != nil {
			return Result{}, err
		}
		return Result{Detail: &Detail{Services: svcs[start:end], NextPageToken: next, RegistryVersion: snap.Version}}, nil
	case OpStartTool, OpGetOperation, OpListOperations, OpCancelOperation, OpDeleteOperation, OpWaitOperation, OpStreamOperation:
		return s.operation(ctx, c, emit)
	case OpGetService:
		sv, ok := s.reg.Snapshot().Service(c.Name)
		if !ok {
			return Result{}, gatewayError(codes.NotFound, ReasonToolServiceMissing, fmt.Sprintf("tool service %q not found", c.Name), map[string]string{"service": c.Name})
		}
		return Result{Detail: &Detail{Service: sv}}, nil
	}
	return Result{}, status.Errorf(codes.Unimplemented, "unknown operation %d", c.Op)
}

func (s *Core) invoke(ctx context.Context, c *Call) (string, error) {
	tool, call, deadline, err := s.start(ctx, c, false)
	if err != nil {
		return "", s.status(ctx, err, c.ShownName(), tool, deadline)
	}
	defer call.Close()
	text, err := call.Wait(ctx)
	if err != nil {
		noteFailure(ctx, err)
		return "", s.status(ctx, err, c.ShownName(), tool, deadline)
	}
	return text, nil
}

func (s *Core) stream(ctx context.Context, c *Call, emit Emit) error {
	tool, call, deadline, err := s.start(ctx, c, true)
	if err != nil {
		return s.status(ctx, err, c.ShownName(), tool, deadline)
	}
	defer call.Close()
	for i := int64(0); ; i++ {
		text, last, err := call.Recv(ctx, s.opts.StreamIdleTimeout, errStreamIdle)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			noteFailure(ctx, err)
			return s.status(ctx, err, c.ShownName(), tool, deadline)
		}
		if err := emit(Chunk{Text: text, Index: i, Last: last}); err != nil {
			return err
		}
	}
}

// start resolves the tool, checks the arguments, works out the call's
// deadline and publishes the envelope. The deadline is the bridge call's
// own (Bridge.Call's deadline) unless the caller's is the earlier: no
// context and timer per call for it. A stream's call gets a stream's
// credit from its start (bridge.CallOptions.Stream). It returns the
// deadline in force.
func (s *Core) start(ctx context.Context, c *Call, stream bool) (*registry.Tool, Reply, time.Time, error) {
	tool, env, deadline, err := s.prepare(ctx, c)
	if err != nil {
		return tool, nil, deadline, err
	}
	var as Assertion
	if s.opts.Callers != nil {
		if as, err = s.assert(c, tool, deadline); err != nil {
			return tool, nil, deadline, err
		}
	}
	call, err := s.bridge.Call(ctx, target(tool), env, deadline, stream, as)
	if err != nil {
		return tool, nil, deadline, err
	}
	return tool, call, deadline, nil
}

// prepare resolves the tool, checks the arguments and works out the
// envelope and the deadline of a call or an operation.
func (s *Core) prepare(ctx context.Context, c *Call) (*registry.Tool, wire.Request, time.Time, error) {
	snap := s.reg.Snapshot()
	tool, ok := snap.Tool(c.Name)
	if !ok {
		if gone, ok := snap.Gone(c.Name); ok {
			// Every instance of its service crashed: fail now, not at the
			// deadline of a request nobody takes.
			return gone, wire.Request{}, time.Time{}, errNoInstance
		}
		return nil, wire.Request{}, time.Time{}, toolNotFound(c.ShownName())
	}
	args, err := checkArguments(tool, c.ShownName(), c.Args, c.ArgsCompact)
	if err != nil {
		return tool, wire.Request{}, time.Time{}, err
	}
	var limit time.Duration
	switch {
	case c.TimeoutSet:
		if c.Timeout <= 0 {
			return tool, wire.Request{}, time.Time{}, gatewayError(codes.InvalidArgument, ReasonInvalidTimeout, "timeout must be a positive duration such as \"5s\"", nil)
		}
		limit = min(c.Timeout, s.opts.MaxTimeout)
	case hasDeadline(ctx) && c.Op != OpStartTool:
		limit = s.opts.MaxTimeout // the caller's deadline applies when earlier
	case tool.Service.Timeout > 0:
		limit = min(tool.Service.Timeout, s.opts.MaxTimeout)
	default:
		limit = s.opts.DefaultTimeout
	}
	env := wire.Request{User: s.user(c), Config: tool.ConfigJSON, Arguments: args}
	deadline := time.Now().Add(limit)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) && c.Op != OpStartTool {
		deadline = dl // an operation outlives its request
	}
	return tool, env, deadline, nil
}

// user is the name of who a call comes from: the envelope's user.
func (s *Core) user(c *Call) string {
	if p := c.Caller.Principal(); c.Authenticated && p.Name != "" {
		return p.Name
	}
	return s.opts.DefaultUser
}

// owner is who a call comes from, with the source of its identity: the
// owner of the operations it starts and the only one who may see them.
func (s *Core) owner(c *Call) string {
	if p := c.Caller.Principal(); c.Authenticated && p.Name != "" {
		return p.String()
	}
	return Subject{Source: SourceAnonymous, Name: s.opts.DefaultUser}.String()
}

func hasDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return ok
}

// errStreamIdle ends a stream whose next chunk is late
// (Options.StreamIdleTimeout).
var errStreamIdle = fmt.Errorf("%w: stream idle", context.DeadlineExceeded)

// target is where a call of tool goes.
func target(tool *registry.Tool) Target {
	return Target{RequestTopic: tool.Service.RequestTopic, ResponseTopic: tool.Service.ResponseTopic}
}

func (s *Core) listTools(c *Call) (Result, error) {
	snap := s.reg.Snapshot()
	tools := snap.Tools()
	set, err := inSet(snap, c)
	if err != nil {
		return Result{}, err
	}
	if set != nil {
		tools = set.Tools()
	}
	if s.opts.Visible != nil {
		visible := make([]*registry.Tool, 0, len(tools))
		for _, t := range tools {
			name := t.Name
			if set != nil { // the policy names the registry's tool
				_, real, _ := set.Lookup(t.Name)
				name = real.Name
			}
			if s.opts.Visible(c, name) {
				visible = append(visible, t)
			}
		}
		tools = visible
	}
	start, end, next, err := page(len(tools), func(i int) string { return tools[i].Name }, c.PageSize, c.PageToken)
	if err != nil {
		return Result{}, err
	}
	return Result{Detail: &Detail{Tools: tools[start:end], NextPageToken: next, RegistryVersion: snap.Version}}, nil
}

// page picks the slice of a sorted list that a page request asks for. The
// token is the last key of the previous page, so pages stay consistent when
// the registry reloads between them.
func page(n int, key func(int) string, size int32, token string) (start, end int, next string, err error) {
	switch {
	case size < 0:
		return 0, 0, "", gatewayError(codes.InvalidArgument, ReasonInvalidPageSize, "page_size must not be negative", nil)
	case size == 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	if token != "" {
		// Strict: the canonical form only, as the OpenAPI document's
		// pattern has it; the decoder would skip line breaks.
		raw, derr := base64.RawURLEncoding.Strict().DecodeString(token)
		if derr != nil || strings.ContainsAny(token, "\r\n") {
			return 0, 0, "", gatewayError(codes.InvalidArgument, ReasonInvalidPageToken, "page_token is not one this server issued", nil)
		}
		after := string(raw)
		lo, hi := 0, n
		for lo < hi { // first key > after
			m := (lo + hi) / 2
			if key(m) <= after {
				lo = m + 1
			} else {
				hi = m
			}
		}
		start = lo
	}
	end = min(start+int(size), n)
	if end < n && end > start {
		next = base64.RawURLEncoding.EncodeToString([]byte(key(end - 1)))
	}
	return start, end, next, nil
}
