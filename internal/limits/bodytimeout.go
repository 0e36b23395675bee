package limits

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultBodyTimeout is the default time a client has to send a request's
// body.
const DefaultBodyTimeout = 30 * time.Second

// BodyTimeout gives a request's body d to arrive in full (d <= 0: no
// limit). It sets the connection's read deadline when the handler starts
// and clears it once the body has been read to its end, so a long
// streamed response, and a request without a body (MCP's GET stream),
// are not limited: only a client that sends its body too slowly is. A
// body cut short by the deadline fails its reader; ErrorHandler answers
// the REST request 408 with a google.rpc.Status body and closes the
// connection (MCP and Connect answer in their own protocol's error form).
// It must run inside MaxBody, so that ErrorHandler sees its body.
func BodyTimeout(d time.Duration, next http.Handler) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			next.ServeHTTP(w, r) // a writer without deadlines: nothing to bound it with
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, limit: d}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody clears the read deadline at the body's end, and notes when
// the deadline cut the body short.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	limit    time.Duration
	cleared  bool
	timedOut atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		if !b.cleared {
			b.cleared = true
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut.Store(true)
		err = fmt.Errorf("request body not received within %s", b.limit)
	}
	return n, err
}

// bodyTimedOut reports whether r's body was cut short by BodyTimeout.
func bodyTimedOut(r *http.Request) (time.Duration, bool) {
	if b, ok := r.Body.(*deadlineBody); ok && b.timedOut.Load() {
		return b.limit, true
	}
	return 0, false
}

func bodyTimeoutStatus(limit time.Duration) *status.Status {
	return withInfo(status.New(codes.DeadlineExceeded, fmt.Sprintf("request body not received within %s", limit)), "BODY_TIMEOUT")
}

// withInfo is st with an ErrorInfo of reason in ErrorDomain.
func withInfo(st *status.Status, reason string) *status.Status {
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		return ds
	}
	return st
}
