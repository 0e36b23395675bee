package telemetry

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/randid"
	"github.com/toolgate/toolgate/internal/toolcall"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RequestIDHeader is the metadata key (the HTTP header, through
// grpc-gateway) that carries a call's request id both ways.
const RequestIDHeader = "x-request-id"

// maxRequestIDLen bounds a request id taken from the caller.
const maxRequestIDLen = 64

// maxToolLen bounds the caller-chosen tool name written to the log.
const maxToolLen = 200

// DefaultMaxLoggedArguments bounds the arguments JSON a debug call log
// line carries; longer JSON is cut and logged as a string.
const DefaultMaxLoggedArguments = 4096

// CallLog writes one structured log line per call, whichever door it came
// by. It is safe for concurrent use.
type CallLog struct {
	log     *slog.Logger
	level   func(codes.Code) slog.Level
	maxArgs int
	noSpans bool
}

// LogOption configures NewCallLog.
type LogOption func(*CallLog)

// WithMaxLoggedArguments replaces DefaultMaxLoggedArguments.
func WithMaxLoggedArguments(n int) LogOption {
	return func(l *CallLog) { l.maxArgs = n }
}

// WithoutSpans tells the call log that no call has a span it records
// (none are exported), so it does not look for one to tag with the
// request id.
func WithoutSpans() LogOption {
	return func(l *CallLog) { l.noSpans = true }
}

// DefaultCodeLevel logs calls that failed through the gateway's or a
// service's fault at Warn, and successes and the caller's mistakes at Info.
func DefaultCodeLevel(c codes.Code) slog.Level {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return slog.LevelWarn
	default:
		return slog.LevelInfo
	}
}

// NewCallLog returns a CallLog writing to log.
func NewCallLog(log *slog.Logger, opts ...LogOption) *CallLog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &CallLog{log: log, level: DefaultCodeLevel, maxArgs: DefaultMaxLoggedArguments}
	for _, o := range opts {
		o(l)
	}
	return l
}

// begin gives the call its request id: the caller's x-request-id when
// that is sane, else a new one.
func (l *CallLog) begin(ctx context.Context, c *toolcall.Call) {
	id := ""
	if v := c.Header.Values(RequestIDHeader); len(v) > 0 && saneRequestID(v[0]) {
		id = v[0]
	}
	if id == "" {
		id = newRequestID()
	}
	c.RequestID = id
	if l.noSpans {
		return
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("toolgate.request_id", id))
		if c.Name != "" {
			span.SetAttributes(attribute.String("toolgate.tool", c.Name))
		}
	}
}

// arguments gives the call's arguments for the log.
func (l *CallLog) arguments(c *toolcall.Call) json.RawMessage {
	if c.Op != toolcall.OpInvoke && c.Op != toolcall.OpStream && c.Op != toolcall.OpStartTool {
		return nil
	}
	b := c.Args
	if len(b) == 0 {
		b = []byte("{}")
	}
	if !json.Valid(b) || (l.maxArgs > 0 && len(b) > l.maxArgs) {
		n := len(b)
		if l.maxArgs > 0 {
			n = min(n, l.maxArgs)
		}
		q, _ := json.Marshal(truncate(string(b), n))
		return q
	}
	return b
}

// finish writes the call's line.
func (l *CallLog) finish(ctx context.Context, c *toolcall.Call, err error, d time.Duration) {
	code := codeOf(err)
	level := l.level(code)
	if !l.log.Enabled(ctx, level) {
		return
	}
	user, source := "", ""
	if c.Authenticated {
		user, source = c.Caller.User, c.Caller.Subject().Origin()
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs,
		slog.String("request_id", c.RequestID),
		slog.String("method", c.MethodName()),
		slog.String("tool", truncate(c.Name, maxToolLen)),
		slog.String("user", user),
		slog.String("source", source),
		slog.String("code", code.String()),
		slog.Float64("duration_ms", math.Round(float64(d.Microseconds()))/1000),
	)
	if c.Authenticated && c.Caller.As.Source != "" {
		// The policy joined the caller's identity to another it acts as.
		attrs = append(attrs, slog.String("as", c.Caller.As.String()))
	}
	if err != nil {
		if st, ok := status.FromError(err); ok {
			for _, det := range st.Details() {
				if ei, ok := det.(*errdetails.ErrorInfo); ok {
					attrs = append(attrs, slog.String("reason", ei.GetReason()))
					break
				}
			}
		}
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	if l.log.Enabled(ctx, slog.LevelDebug) {
		// A status message may quote what a tool service said about the
		// arguments: Debug only, as the arguments are.
		if err != nil {
			attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
		}
		if args := l.arguments(c); args != nil {
			attrs = append(attrs, slog.Any("arguments", args))
		}
	}
	l.log.LogAttrs(ctx, level, "call", attrs...)
}

// Middleware gives every call its request id and writes its log line
// when it ends. Run it before authentication, so that refused calls are
// logged too; the door answers the request id (x-request-id).
func (l *CallLog) Middleware() toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (res toolcall.Result, err error) {
			start := time.Now()
			l.begin(ctx, c)
			defer func() { l.finish(ctx, c, err, time.Since(start)) }()
			return next(ctx, c, emit)
		}
	}
}

// saneRequestID accepts 1 to 64 characters of [A-Za-z0-9._-].
func saneRequestID(s string) bool {
	if s == "" || len(s) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// newRequestID returns 128 random bits in hex.
func newRequestID() string { return randid.New() }

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
