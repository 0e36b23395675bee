package limits

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// DefaultMaxBody is the default request body limit: 1 MiB.
const DefaultMaxBody = 1 << 20

// ErrorHandler is grpc-gateway's error handler for this package
// (runtime.WithErrorHandler(limits.ErrorHandler)). It writes what
// runtime.DefaultHTTPErrorHandler writes, plus:
//
//   - a Retry-After header (whole seconds, rounded up) when the status
//     carries a google.rpc.RetryInfo, as rate-limited and overloaded calls do;
//   - HTTP 413 instead of 400 when the request body went over the MaxBody
//     limit while grpc-gateway was reading it;
//   - HTTP 408 (and the connection closed) when the body did not arrive
//     within BodyTimeout.
func ErrorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if s, ok := r.Context().Value(stateKey{}).(*reqState); ok && s.over.Load() {
		err = &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge, Err: tooLarge(s.limit).Err()}
	} else if limit, ok := bodyTimedOut(r); ok {
		w.Header().Set("Connection", "close")
		err = &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestTimeout, Err: bodyTimeoutStatus(limit).Err()}
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

type stateKey struct{}

// reqState is what MaxBody keeps for ErrorHandler.
type reqState struct {
	limit int64
	over  atomic.Bool
}

// MaxBody limits request bodies to limit bytes (DefaultMaxBody when
// limit <= 0). A request whose Content-Length says more is refused at once;
// one whose body turns out longer fails when the reader passes the limit,
// and ErrorHandler reports it. Either way the answer is HTTP 413 with a
// google.rpc.Status body {"code": 8, "message": "request body larger than
// N bytes"}: 413 rather than the 429 grpc-gateway gives RESOURCE_EXHAUSTED,
// because the call never reached gRPC and retrying it later cannot help.
//
// For a body of unknown length MaxBody also keeps the per-request state
// ErrorHandler uses, so it must wrap the grpc-gateway mux.
func MaxBody(limit int64, next http.Handler) http.Handler {
	if limit <= 0 {
		limit = DefaultMaxBody
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			writeTooLarge(w, limit)
			return
		}
		if r.ContentLength >= 0 {
			// The body is as long as its Content-Length says (net/http
			// reads no further), which is within the limit: nothing to
			// watch, and no state per request.
			next.ServeHTTP(w, r)
			return
		}
		s := &reqState{limit: limit}
		r = r.WithContext(context.WithValue(r.Context(), stateKey{}, s))
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, limit), state: s}
		}
		next.ServeHTTP(w, r)
	})
}

// limitedBody notes that the limit was hit, since grpc-gateway turns the
// read error into a plain InvalidArgument status.
type limitedBody struct {
	io.ReadCloser
	state *reqState
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		b.state.over.Store(true)
	}
	return n, err
}

func tooLarge(limit int64) *status.Status {
	return withInfo(status.New(codes.ResourceExhausted, fmt.Sprintf("request body larger than %d bytes", limit)), "BODY_TOO_LARGE")
}

// writeTooLarge answers 413 before grpc-gateway is involved, in the JSON
// form the gateway's marshaler uses for statuses.
func writeTooLarge(w http.ResponseWriter, limit int64) {
	body, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(tooLarge(limit).Proto())
	if err != nil {
		body = []byte(`{"code":8,"message":"request body too large"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_, _ = w.Write(body)
}
