package toolcall

import (
	"errors"
	"fmt"
	"net/http"
	"os"

	"google.golang.org/grpc/codes"
)

// ReasonHeadersTooLarge is the reason of a request refused for its
// header lines or metadata, on every door.
const ReasonHeadersTooLarge = "HEADERS_TOO_LARGE"

// ReasonBodyTooLarge and ReasonBodyTimeout are the ErrorInfo reasons of a
// request body over the size limit and of one that did not arrive in time.
const (
	ReasonBodyTooLarge = "BODY_TOO_LARGE"
	ReasonBodyTimeout  = "BODY_TIMEOUT"
)

// HeadersTooLarge is the status of a request whose header lines (or
// metadata) are size bytes, more than limit: RESOURCE_EXHAUSTED, reason
// ReasonHeadersTooLarge. Every door answers it in its own form.
func HeadersTooLarge(size, limit int) error {
	return gatewayError(codes.ResourceExhausted, ReasonHeadersTooLarge,
		fmt.Sprintf("request headers are %d bytes, more than the %d this gateway accepts", size, limit), nil)
}

// HTTPHeaderBytes counts a request's header lines as net/http does for
// its own limit: the request line, names, values and separators.
func HTTPHeaderBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + 12
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// BodyError is the status of a request body an HTTP door could not read:
// RESOURCE_EXHAUSTED for one over the body limit (*http.MaxBytesError),
// DEADLINE_EXCEEDED for one that did not arrive in time
// (os.ErrDeadlineExceeded, the message saying so), else INVALID_ARGUMENT.
func BodyError(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return gatewayError(codes.ResourceExhausted, ReasonBodyTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit), nil)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return gatewayError(codes.DeadlineExceeded, ReasonBodyTimeout, err.Error(), nil)
	}
	return gatewayError(codes.InvalidArgument, ReasonInvalidBody, fmt.Sprintf("the request body could not be read: %v", err), nil)
}
