package toolcall

import (
	"errors"
	"fmt"

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

// ReasonInstanceLost is the ErrorInfo reason of a call whose tool
// service's instance, which had taken it, was lost before it answered:
// the call may have run.
const ReasonInstanceLost = "INSTANCE_LOST"

// ReasonUnsupportedEncoding is the ErrorInfo reason of a request body
// in a Content-Encoding the gateway does not decode (HTTP 415).
const ReasonUnsupportedEncoding = "UNSUPPORTED_CONTENT_ENCODING"

// AcceptedEncodings are the request Content-Encodings the HTTP listener
// decodes, as its 415 answers name them in Accept-Encoding.
const AcceptedEncodings = "gzip, identity"

// ErrUnsupportedEncoding is what reading a request body in a
// Content-Encoding the gateway does not decode fails with (errors.Is).
var ErrUnsupportedEncoding = errors.New("unsupported Content-Encoding")

// HeadersTooLarge is the status of a request whose header lines (or
// metadata) are size bytes, more than limit: RESOURCE_EXHAUSTED, reason
// ReasonHeadersTooLarge. Every door answers it in its own form.
func HeadersTooLarge(size, limit int) error {
	return gatewayError(codes.ResourceExhausted, ReasonHeadersTooLarge,
		fmt.Sprintf("request headers are %d bytes, more than the %d this gateway accepts", size, limit), nil)
}
