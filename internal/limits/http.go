package limits

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorHandler is grpc-gateway's error handler for this package
// (runtime.WithErrorHandler(limits.ErrorHandler)). It writes what
// runtime.DefaultHTTPErrorHandler writes, plus:
//
//   - a Retry-After header (whole seconds, rounded up) when the status
//     carries a google.rpc.RetryInfo, as rate-limited and overloaded calls do;
//   - HTTP 413 instead of 400 when the request body went over
//     Requests.MaxBodyBytes (HTTP) while it was read;
//   - HTTP 408 (and the connection closed) when the body did not arrive
//     within Requests.BodyTimeout;
//   - HTTP 415, with Accept-Encoding naming what is decoded, for a body in
//     a Content-Encoding other than gzip and identity.
func ErrorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if b, ok := r.Body.(*limitedBody); ok && b.over.Load() {
		err = &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge, Err: tooLarge(b.limit).Err()}
	} else if ok && b.timedOut.Load() {
		err = &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestTimeout, Err: status.New(codes.DeadlineExceeded, (&bodyTimeoutError{b.timeout}).Error()).Err()}
	} else if ok && b.badEncoding.Load() {
		w.Header().Set("Accept-Encoding", toolcall.AcceptedEncodings)
		err = &runtime.HTTPStatusError{HTTPStatus: http.StatusUnsupportedMediaType, Err: err}
	} else if secs, ok := RetryAfter(err); ok {
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// RetryAfter returns the Retry-After seconds of err: the RetryInfo delay
// of its status rounded up to whole seconds, at least 1.
func RetryAfter(err error) (int64, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			secs := math.Ceil(ri.GetRetryDelay().AsDuration().Seconds())
			return max(int64(secs), 1), true
		}
	}
	return 0, false
}

// MaxBody is HTTP with a body limit only (DefaultMaxBody when limit <= 0).
func MaxBody(limit int64, next http.Handler) http.Handler {
	return HTTP(Requests{MaxBodyBytes: limit}, nil, next)
}

// HTTP applies q's body limits to the requests of an HTTP listener,
// before its handlers see them:
//
//   - size: a body fails its reader with *http.MaxBytesError when it
//     passes MaxBodyBytes (one whose Content-Length says more is read up
//     to the bound, so that each door answers in its own form). A body sent with "Content-Encoding: gzip"
//     is decoded as it is read and the bound counts the decoded bytes
//     (the compressed ones too): the handler reads plain JSON (or a
//     Connect message), and inflating stops at the bound.
//   - time: the body must arrive within BodyTimeout of the handler's
//     start; the connection's read deadline is cleared at the body's end,
//     so responses are not limited. A body cut short fails its reader with
//     an error that is os.ErrDeadlineExceeded (errors.Is) and says so.
//
// Either refusal closes the connection after the answer: the rest of the
// body cannot be trusted to end, and is logged at info level on log (nil:
// not logged). ErrorHandler answers them on REST (413, 408,
// google.rpc.Status JSON); the other doors answer the reader's errors in
// their own forms.
func HTTP(q Requests, log *slog.Logger, next http.Handler) http.Handler {
	q = q.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Err() != nil {
			// The request ended before it was served (an HTTP/2 stream
			// reset, its connection gone): nobody waits for an answer,
			// so no work is done for it.
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &limitedBody{raw: r.Body, w: w, r: r, log: log, limit: q.MaxBodyBytes, timeout: q.BodyTimeout}
		switch {
		case q.BodyTimeout <= 0:
		case r.ProtoMajor >= 2:
			// HTTP/2: a timer of our own that closes the body when it
			// fires, stopped with the handler. The stream's own read
			// deadline is a timer only the connection's serve loop can
			// stop: when the connection is gone before the handler ends
			// (a client resetting streams, then leaving), it would live —
			// with what it holds — until it fired.
			b.expiry = time.AfterFunc(q.BodyTimeout, b.expire)
			defer b.clearDeadline()
		default:
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(q.BodyTimeout)) == nil {
				b.rc = rc // else a writer without deadlines: nothing to bound it with
				defer b.clearDeadline()
			}
		}
		var src io.ReadCloser = rawBody{b}
		if r.ContentLength < 0 || r.ContentLength > q.MaxBodyBytes {
			// A declared length within the bound is what net/http reads,
			// no more: nothing to count. One over it is read up to the
			// bound, so that each door answers in its own form.
			src = http.MaxBytesReader(w, src, q.MaxBodyBytes)
		}
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "":
		case "gzip", "x-gzip":
			src = http.MaxBytesReader(w, &gzipBody{src: src}, q.MaxBodyBytes)
			r.Header.Del("Content-Encoding")
			r.ContentLength = -1
		case "identity":
			r.Header.Del("Content-Encoding")
		default:
			// Not decoded here: the body is refused when read (415 on REST
			// and MCP). The header stays, for a protocol that negotiates
			// encodings of its own (Connect) to answer first.
			b.badEncoding.Store(true)
			refused(r, toolcall.GatewayError(codes.Unimplemented, toolcall.ReasonUnsupportedEncoding,
				fmt.Sprintf("request body in Content-Encoding %q, which is not decoded", enc), nil))
			src = failedBody{fmt.Errorf("%w %q: this gateway decodes request bodies in %s",
				toolcall.ErrUnsupportedEncoding, enc, toolcall.AcceptedEncodings)}
		}
		if _, plain := src.(rawBody); !plain {
			b.src = src
		}
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// Refusals hears of the refusals HTTP makes of one request: a handler in
// front of HTTP puts it in the request's context (WithRefusals), and
// HTTP tells it, as the status the doors answer with, of a body over the
// size limit or not in time (when the door reads it), or in an encoding
// not decoded (as the request arrives). It hears at most one of each, on
// the goroutine reading the body.
type Refusals interface{ Refused(err error) }

type refusalsKey struct{}

// WithRefusals is ctx with r, which HTTP tells of its refusals of the
// request whose context it is.
func WithRefusals(ctx context.Context, r Refusals) context.Context {
	return context.WithValue(ctx, refusalsKey{}, r)
}

// RefusalsOf is the Refusals in ctx, nil when none.
func RefusalsOf(ctx context.Context) Refusals {
	r, _ := ctx.Value(refusalsKey{}).(Refusals)
	return r
}

// refused tells r's Refusals, when it has one, of err.
func refused(r *http.Request, err error) {
	if rs := RefusalsOf(r.Context()); rs != nil {
		rs.Refused(err)
	}
}

// limitedBody is a request body under HTTP's limits: the bottom reads
// the connection under the read deadline, the layers above (b.src, when
// set) bound its size and decode it.
type limitedBody struct {
	raw io.ReadCloser
	src io.Reader // nil: read raw as it is
	w   http.ResponseWriter
	r   *http.Request // for the log
	log *slog.Logger
	rc  *http.ResponseController // nil: no connection deadline to clear
	// expiry closes the body when its time is up (HTTP/2, instead of rc);
	// expired says it did.
	expiry   *time.Timer
	expired  atomic.Bool
	limit    int64
	timeout  time.Duration
	cleared  atomic.Bool
	over     atomic.Bool
	timedOut atomic.Bool
	// badEncoding: a Content-Encoding the gateway does not decode.
	badEncoding atomic.Bool
}

// failedBody is a body that cannot be read, for the reason it gives.
type failedBody struct{ err error }

func (f failedBody) Read([]byte) (int, error) { return 0, f.err }
func (f failedBody) Close() error             { return nil }

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.src == nil {
		return b.readRaw(p)
	}
	n, err := b.src.Read(p)
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) && !b.over.Swap(true) {
		b.log.InfoContext(b.r.Context(), "request refused: body too large", "method", b.r.Method, "path", b.r.URL.Path,
			"peer", b.r.RemoteAddr, "limit", b.limit, "content_length", b.r.ContentLength)
		refused(b.r, tooLarge(b.limit).Err())
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.raw.Close() }

// readRaw reads the connection: it clears the read deadline at the end
// of the body, and makes the deadline's error say what happened. The
// handler reads its body before it answers, so the header set here is in
// time.
func (b *limitedBody) readRaw(p []byte) (int, error) {
	n, err := b.raw.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.clearDeadline()
	case b.rc != nil && errors.Is(err, os.ErrDeadlineExceeded), b.expired.Load():
		if !b.timedOut.Swap(true) {
			b.log.InfoContext(b.r.Context(), "request refused: body not received in time", "method", b.r.Method, "path", b.r.URL.Path,
				"peer", b.r.RemoteAddr, "limit", b.timeout)
			refused(b.r, toolcall.GatewayError(codes.DeadlineExceeded, toolcall.ReasonBodyTimeout, (&bodyTimeoutError{b.timeout}).Error(), nil))
		}
		b.w.Header().Set("Connection", "close")
		err = &bodyTimeoutError{b.timeout}
	}
	return n, err
}

// clearDeadline clears the read deadline, once.
func (b *limitedBody) clearDeadline() {
	if b.cleared.Swap(true) {
		return
	}
	switch {
	case b.expiry != nil:
		b.expiry.Stop()
	case b.rc != nil:
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// expire ends the body whose time is up (HTTP/2): a read under way, and
// every later one, fails, and is told as the deadline.
func (b *limitedBody) expire() {
	if b.cleared.Load() {
		return
	}
	b.expired.Store(true)
	_ = b.raw.Close()
}

// rawBody is the bottom of a limitedBody's layers.
type rawBody struct{ b *limitedBody }

func (r rawBody) Read(p []byte) (int, error) { return r.b.readRaw(p) }
func (r rawBody) Close() error               { return nil }

// bodyTimeoutError is the error of a body that did not arrive in time. It
// is os.ErrDeadlineExceeded, as the connection's deadline said, so that
// protocol libraries (connect-go) answer it as a deadline.
type bodyTimeoutError struct{ limit time.Duration }

func (e *bodyTimeoutError) Error() string {
	return fmt.Sprintf("request body not received within %s", e.limit)
}

func (e *bodyTimeoutError) Is(target error) bool { return target == os.ErrDeadlineExceeded }

// Timeout reports true, as net.Error's timeouts do.
func (e *bodyTimeoutError) Timeout() bool { return true }

// gzipBody decodes a gzip body as it is read; the reader is made at the
// first read, so that a body never read costs nothing.
type gzipBody struct {
	src io.ReadCloser
	zr  *gzip.Reader
	err error
}

func (g *gzipBody) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		zr, err := gzip.NewReader(g.src)
		if err != nil {
			g.err = gzipError(err)
			return 0, g.err
		}
		g.zr = zr
	}
	n, err := g.zr.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = gzipError(err)
	}
	return n, err
}

func (g *gzipBody) Close() error { return g.src.Close() }

// gzipError says that a gzip body could not be decoded, keeping the
// errors of the layers below (size, time) as they are.
func gzipError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return fmt.Errorf("the request body is not valid gzip (Content-Encoding: gzip): %w", err)
}

// withInfo is st with an ErrorInfo of reason in ErrorDomain.
func withInfo(st *status.Status, reason string) *status.Status {
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		return ds
	}
	return st
}

func tooLarge(limit int64) *status.Status {
	return withInfo(status.New(codes.ResourceExhausted, fmt.Sprintf("request body larger than %d bytes", limit)), "BODY_TOO_LARGE")
}
