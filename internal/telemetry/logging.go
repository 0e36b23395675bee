package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/argsjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
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

// CallLog writes one structured log line per gRPC call (and so per REST
// call). It is safe for concurrent use.
type CallLog struct {
	log     *slog.Logger
	user    func(context.Context) string
	level   func(codes.Code) slog.Level
	quiet   []string
	maxArgs int
}

// LogOption configures NewCallLog.
type LogOption func(*CallLog)

// WithUser names the caller of a call from its context, such as auth.User.
// It is asked on the context after authentication when the
// UserInterceptors run after the authenticating interceptor, else on the
// logging interceptor's own context.
func WithUser(f func(context.Context) string) LogOption {
	return func(l *CallLog) { l.user = f }
}

// WithMaxLoggedArguments replaces DefaultMaxLoggedArguments.
func WithMaxLoggedArguments(n int) LogOption {
	return func(l *CallLog) { l.maxArgs = n }
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
	l := &CallLog{log: log, level: DefaultCodeLevel, quiet: []string{"/grpc.health.v1.Health/"}, maxArgs: DefaultMaxLoggedArguments}
	for _, o := range opts {
		o(l)
	}
	return l
}

// callRecord is what the call log learns of a call while it runs.
type callRecord struct {
	id     string
	method string
	// header holds the id for the x-request-id response header, so that
	// setting it needs no slice of its own.
	header [1]string

	mu   sync.Mutex
	tool string
	user string
	args json.RawMessage // only when Debug is enabled
}

func (r *callRecord) setUser(u string) {
	r.mu.Lock()
	r.user = u
	r.mu.Unlock()
}

type recordKey struct{}

func recordFrom(ctx context.Context) *callRecord {
	r, _ := ctx.Value(recordKey{}).(*callRecord)
	return r
}

// begin starts the record of a call: its request id comes from the
// caller's x-request-id when that is sane, else it is new.
func (l *CallLog) begin(ctx context.Context, method string) (context.Context, *callRecord) {
	id := ""
	if v := metadata.ValueFromIncomingContext(ctx, RequestIDHeader); len(v) > 0 && saneRequestID(v[0]) {
		id = v[0]
	}
	if id == "" {
		id = newRequestID()
	}
	r := &callRecord{id: id, method: method, header: [1]string{id}}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("toolgate.request_id", id))
	}
	return context.WithValue(ctx, recordKey{}, r), r
}

// request notes what the call's request message says: its tool, and its
// arguments when the logger is enabled at Debug.
func (l *CallLog) request(ctx context.Context, r *callRecord, req any) {
	tool := toolOf(req)
	if span := trace.SpanFromContext(ctx); tool != "" && span.IsRecording() {
		span.SetAttributes(attribute.String("toolgate.tool", tool))
	}
	var args json.RawMessage
	if a, ok := req.(interface{ GetArguments() *structpb.Struct }); ok && l.log.Enabled(ctx, slog.LevelDebug) {
		args = l.argumentsJSON(ctx, a.GetArguments())
	}
	r.mu.Lock()
	r.tool, r.args = truncate(tool, maxToolLen), args
	r.mu.Unlock()
}

// argumentsJSON gives the call's arguments for the log: the request's
// Struct, or the JSON text a front door passed on (argsjson).
func (l *CallLog) argumentsJSON(ctx context.Context, s *structpb.Struct) json.RawMessage {
	var b []byte
	if raw, ok := argsjson.FromContext(ctx); ok && s == nil {
		b = raw
	} else if s == nil {
		return json.RawMessage("null")
	} else {
		var err error
		if b, err = protojson.Marshal(s); err != nil {
			return nil
		}
	}
	if l.maxArgs > 0 && len(b) > l.maxArgs {
		q, _ := json.Marshal(truncate(string(b), l.maxArgs))
		return q
	}
	return b
}

// finish writes the call's line.
func (l *CallLog) finish(ctx context.Context, r *callRecord, err error, d time.Duration) {
	code := codeOf(err)
	level := l.level(code)
	if code == codes.OK && l.isQuiet(r.method) {
		level = slog.LevelDebug
	}
	if !l.log.Enabled(ctx, level) {
		return
	}
	r.mu.Lock()
	tool, user, args := r.tool, r.user, r.args
	r.mu.Unlock()
	if user == "" && l.user != nil {
		user = l.user(ctx)
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs,
		slog.String("request_id", r.id),
		slog.String("method", r.method),
		slog.String("tool", tool),
		slog.String("user", user),
		slog.String("code", code.String()),
		slog.Float64("duration_ms", math.Round(float64(d.Microseconds()))/1000),
	)
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
		if args != nil {
			attrs = append(attrs, slog.Any("arguments", args))
		}
	}
	l.log.LogAttrs(ctx, level, "call", attrs...)
}

func (l *CallLog) isQuiet(method string) bool {
	for _, p := range l.quiet {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// UnaryServerInterceptor logs unary calls. Place it first, before
// authentication, so that refused calls are logged too; it answers with
// the call's request id in the x-request-id response header.
func (l *CallLog) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		start := time.Now()
		ctx, r := l.begin(ctx, methodLabel(ctx, info.FullMethod))
		_ = grpc.SetHeader(ctx, metadata.MD{RequestIDHeader: r.header[:]})
		l.request(ctx, r, req)
		defer func() { l.finish(ctx, r, err, time.Since(start)) }()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor logs streams when they end, naming the tool of
// their first request message.
func (l *CallLog) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		start := time.Now()
		ctx, r := l.begin(ss.Context(), methodLabel(ss.Context(), info.FullMethod))
		_ = ss.SetHeader(metadata.MD{RequestIDHeader: r.header[:]})
		ws := &firstMessageStream{ServerStream: ss, ctx: ctx, onFirst: func(m any) { l.request(ctx, r, m) }}
		defer func() { l.finish(ctx, r, err, time.Since(start)) }()
		return handler(srv, ws)
	}
}

// UnaryUserInterceptor notes the caller that WithUser names in the call's
// log record. Place it right after the authenticating interceptor when the
// logging interceptor comes before it.
func (l *CallLog) UnaryUserInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		l.noteUser(ctx)
		return handler(ctx, req)
	}
}

// StreamUserInterceptor is UnaryUserInterceptor for streams.
func (l *CallLog) StreamUserInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		l.noteUser(ss.Context())
		return handler(srv, ss)
	}
}

func (l *CallLog) noteUser(ctx context.Context) {
	if l.user == nil {
		return
	}
	if r := recordFrom(ctx); r != nil {
		r.setUser(l.user(ctx))
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
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var h [32]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}

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
