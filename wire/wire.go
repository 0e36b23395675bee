// Package wire is the tool-service wire contract: the JSON envelopes that
// travel over Apache Pulsar between a caller and a tool service, the message
// properties that correlate them, and the topic naming convention.
//
// It matches TrustGraph's Python ToolServiceRequest / ToolServiceResponse
// byte for byte in meaning: config and arguments are JSON objects encoded as
// strings, every field is always written, and unknown keys are ignored.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Message property names.
const (
	// PropID correlates a request with its replies. The caller sets it and
	// the service echoes it on every reply.
	PropID = "id"
	// PropDeadline is the absolute deadline of a request, in Unix
	// milliseconds, written by toolgate. Services may drop requests whose
	// deadline has passed. TrustGraph's Python services ignore it.
	PropDeadline = "toolgate-deadline-ms"
	// PropTraceparent carries the W3C trace context of the call.
	PropTraceparent = "traceparent"
	// PropSeq numbers the reply messages of one call, from 0, on replies
	// of services that set it (the Go SDK does; TrustGraph's Python
	// services send one message and do not). Non-persistent topics drop
	// messages silently when a consumer falls behind; the numbers let the
	// caller tell a whole reply from one with a hole in it.
	PropSeq = "toolgate-seq"
	// PropReplyTo names the topic a caller wants the replies of this
	// request on: its own reply topic (ReplyTopic), so that replicas of a
	// gateway do not each receive every reply. Services that honour it
	// (the Go SDK does) answer there, and only there, when ReplyToAllowed
	// accepts it; otherwise, and on services that ignore it (TrustGraph's
	// Python services), the replies go to the service's response topic.
	PropReplyTo = "reply-to"
	// PropCredit is flow control of a streamed reply. On a request, the
	// caller's first window: the service may send reply messages numbered
	// (PropSeq) below it, then waits for more credit; a request without it
	// is answered without waiting. On a grant (a message to PropFlow's
	// topic, with PropID), the new limit, cumulative — a later grant
	// replaces a lost one — or CreditCancel: the caller is gone, stop.
	// The message that ends the reply needs no credit. The Go SDK honours
	// it; TrustGraph's Python services ignore it. A CreditCancel may also
	// come on the service's cancel topic (CancelTopic), for a call whose
	// flow topic the caller does not know.
	PropCredit = "toolgate-credit"
	// PropFlow, on the reply chunks of a service that honours PropCredit,
	// names the topic where that service instance takes grants
	// (FlowTopic).
	PropFlow = "toolgate-flow"
	// PropReceipt, on a request ("1"), asks the service for a receipt: a
	// message with PropID, PropInstance and PropReceipt ("1") and no
	// payload, sent where the replies go, when the instance that took the
	// call has sent nothing for it ReceiptAfter after taking it. A caller
	// that hears nothing at all for a call may publish the request once
	// more with the same PropID (after an instance of the service stopped:
	// the request may have been dropped on its way to that instance's
	// closing consumer); an instance that has the call already does not
	// run it again. The Go SDK honours it, and marks every reply with its
	// PropInstance, by which a caller learns that it does; TrustGraph's
	// Python services ignore it.
	PropReceipt = "toolgate-receipt"
)

// ReceiptAfter is how long an instance that took a call asking for a
// receipt (PropReceipt) waits for the call's first reply before it sends
// the receipt instead: most calls are answered sooner, and cost nothing.
const ReceiptAfter = 250 * time.Millisecond

// CreditCancel is the PropCredit of a grant that ends the call: on a
// stream's flow topic (PropFlow), or on the service's cancel topic
// (CancelTopic), which every instance of the service reads.
const CreditCancel = "cancel"

// CreditResend is the PropCredit of a message on the service's cancel topic
// (CancelTopic) asking for the last reply message of the call PropID once
// more: the caller's consumer of the topic that reply went to was away for
// a moment (the topic moved to another broker), and a message published
// then is dropped on a non-persistent topic. The instance that answered the
// call and still holds that message publishes it again, to the topic it
// went to; the others, and services that do not know the request, ignore
// it.
const CreditResend = "resend"

// ErrorTypeToolService is the error type TrustGraph's Python base service
// reports for any exception raised by a tool.
const ErrorTypeToolService = "tool-service-error"

// Request is the envelope a caller publishes on a tool service's request
// topic.
type Request struct {
	// User is the caller's identity (multi-tenancy).
	User string `json:"user"`
	// Config is a JSON object, encoded as a string, with the configuration
	// values the tool passes to its service.
	Config string `json:"config"`
	// Arguments is a JSON object, encoded as a string, with the call's
	// arguments.
	Arguments string `json:"arguments"`
}

// Error is a failure reported by a tool service.
type Error struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Type
	}
	return e.Type + ": " + e.Message
}

// Response is one reply message of a tool service. A reply may be split into
// several messages; the last one has EndOfStream set.
type Response struct {
	Error       *Error `json:"error"`
	Response    string `json:"response"`
	EndOfStream bool   `json:"end_of_stream"`
}

// EncodeRequest returns the JSON payload of r. Empty Config or Arguments are
// written as "{}", as the Python peers expect.
func EncodeRequest(r Request) []byte {
	if r.Config == "" {
		r.Config = "{}"
	}
	if r.Arguments == "" {
		r.Arguments = "{}"
	}
	b := make([]byte, 0, len(`{"user":"","config":"","arguments":""}`)+len(r.User)+len(r.Config)+len(r.Arguments)+16)
	b = append(b, `{"user":`...)
	b = appendString(b, r.User)
	b = append(b, `,"config":`...)
	b = appendString(b, r.Config)
	b = append(b, `,"arguments":`...)
	b = appendString(b, r.Arguments)
	return append(b, '}')
}

// DecodeRequest parses a request payload.
func DecodeRequest(b []byte) (Request, error) {
	var r Request
	if err := strictShape(b); err != nil {
		return r, fmt.Errorf("request: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("request: %w", err)
	}
	return r, nil
}

// EncodeResponse returns the JSON payload of r.
func EncodeResponse(r Response) []byte {
	n := len(`{"error":{"type":"","message":""},"response":"","end_of_stream":false}`) + len(r.Response) + 16
	if r.Error != nil {
		n += len(r.Error.Type) + len(r.Error.Message)
	}
	b := make([]byte, 0, n)
	if r.Error == nil {
		b = append(b, `{"error":null`...)
	} else {
		b = append(b, `{"error":{"type":`...)
		b = appendString(b, r.Error.Type)
		b = append(b, `,"message":`...)
		b = appendString(b, r.Error.Message)
		b = append(b, '}')
	}
	b = append(b, `,"response":`...)
	b = appendString(b, r.Response)
	if r.EndOfStream {
		b = append(b, `,"end_of_stream":true}`...)
	} else {
		b = append(b, `,"end_of_stream":false}`...)
	}
	return b
}

// ErrMalformed reports a payload that is not a JSON object of the expected
// shape.
var ErrMalformed = errors.New("malformed message")

// DecodeResponse parses a reply payload. It fails on anything but a JSON
// object whose known fields have the right types; unknown keys are ignored.
func DecodeResponse(b []byte) (Response, error) {
	if r, ok := decodeChunk(b); ok {
		return r, nil
	}
	var r Response
	if err := strictShape(b); err != nil {
		return r, fmt.Errorf("response: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("response: %w: %w", ErrMalformed, err)
	}
	if r.Error != nil && r.Error.Type == "" && r.Error.Message == "" {
		// {"error": {}} carries no failure; treat it like null.
		r.Error = nil
	}
	return r, nil
}

// strictShape rejects payloads that are not a JSON object.
func strictShape(b []byte) error {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	return nil
}

// FormatDeadline renders t for the PropDeadline property.
func FormatDeadline(t time.Time) string {
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// ParseDeadline reads a PropDeadline property value.
func ParseDeadline(s string) (time.Time, bool) {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// Prefixes and suffixes of a reply without error as EncodeResponse writes
// it (the Go SDK's chunks).
const (
	chunkPrefix = `{"error":null,"response":"`
	chunkMore   = `","end_of_stream":false}`
	chunkLast   = `","end_of_stream":true}`
)

// decodeChunk decodes, without encoding/json, a reply of exactly the shape
// EncodeResponse writes without an error, whose text is printable ASCII
// with no escapes — what json.Unmarshal would decode to the same Response.
// Anything else is left to json.Unmarshal (ok false).
func decodeChunk(b []byte) (Response, bool) {
	if len(b) < len(chunkPrefix)+len(chunkLast) || string(b[:len(chunkPrefix)]) != chunkPrefix {
		return Response{}, false
	}
	rest := b[len(chunkPrefix):]
	var last bool
	switch {
	case bytes.HasSuffix(rest, []byte(chunkMore)):
		rest = rest[:len(rest)-len(chunkMore)]
	case bytes.HasSuffix(rest, []byte(chunkLast)):
		rest, last = rest[:len(rest)-len(chunkLast)], true
	default:
		return Response{}, false
	}
	for _, c := range rest {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return Response{}, false
		}
	}
	return Response{Response: string(rest), EndOfStream: last}, true
}
