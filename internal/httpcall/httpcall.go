// Package httpcall is what the HTTP doors (REST, MCP, Connect) share in
// reading a call from an http.Request: its header as a toolcall.Header,
// the size of its header lines, its body, and the status of a body that
// could not be read. The core (toolcall) knows no door and no HTTP; this
// package sits beside the doors, over the core.
package httpcall

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
)

// Header is an HTTP request's header as a call's Header, the one rule
// every HTTP door reads credentials, request id and trace context by. The
// names the middleware asks for are looked up in their canonical form
// without building it per call.
func Header(h http.Header) toolcall.Header { return header(h) }

type header http.Header

func (h header) Values(key string) []string {
	switch key {
	case "authorization":
		return h["Authorization"]
	case "x-api-key":
		return h["X-Api-Key"]
	case "x-request-id":
		return h["X-Request-Id"]
	case "traceparent":
		return h["Traceparent"]
	case "tracestate":
		return h["Tracestate"]
	case "tool-set":
		return h["Tool-Set"]
	case "idempotency-key":
		return h["Idempotency-Key"]
	case "mcp-protocol-version":
		return h["Mcp-Protocol-Version"]
	}
	return http.Header(h).Values(key)
}

// HeaderBytes counts a request's header lines as net/http does for its
// own limit: the request line, names, values and separators.
func HeaderBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + 12
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// maxPresized bounds the buffer ReadBody makes from Content-Length before
// reading: a larger body grows as it arrives (and meets the body limit).
const maxPresized = 64 << 10

// ReadBody reads a request body whole, in one buffer of its declared
// length when it declares one (io.ReadAll starts small and grows).
func ReadBody(r *http.Request) ([]byte, error) {
	n := r.ContentLength
	if n <= 0 || n > maxPresized {
		return io.ReadAll(r.Body)
	}
	buf := make([]byte, n+1) // one more: the read that finds the end
	read := 0
	for {
		m, err := r.Body.Read(buf[read:])
		read += m
		if err == io.EOF {
			return buf[:read], nil
		}
		if err != nil {
			return buf[:read], err
		}
		if read == len(buf) {
			rest, err := io.ReadAll(r.Body) // longer than declared: net/http refuses it
			return append(buf, rest...), err
		}
	}
}

// BodyError is the status of a request body an HTTP door could not read:
// RESOURCE_EXHAUSTED for one over the body limit (*http.MaxBytesError),
// DEADLINE_EXCEEDED for one that did not arrive in time
// (os.ErrDeadlineExceeded, the message saying so), UNIMPLEMENTED for one
// in a Content-Encoding the gateway does not decode
// (toolcall.ErrUnsupportedEncoding; HTTP 415), else INVALID_ARGUMENT.
func BodyError(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return toolcall.GatewayError(codes.ResourceExhausted, toolcall.ReasonBodyTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit), nil)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return toolcall.GatewayError(codes.DeadlineExceeded, toolcall.ReasonBodyTimeout, err.Error(), nil)
	case errors.Is(err, toolcall.ErrUnsupportedEncoding):
		return toolcall.GatewayError(codes.Unimplemented, toolcall.ReasonUnsupportedEncoding, err.Error(), nil)
	}
	return toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonInvalidBody, fmt.Sprintf("the request body could not be read: %v", err), nil)
}
