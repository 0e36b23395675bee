package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/wire"
)

// The events of the log's lines.
const (
	// EventOpen begins a file, and every run of a gateway writing to it:
	// its prev is the digest of the line before (of the previous file's
	// last line when the file is new after a rotation; zeros for a new
	// log).
	EventOpen = "open"
	// EventCall is one call, or one request refused before it became one.
	EventCall = "call"
	// EventDropped says that records were not written (the queue was
	// full, or a write failed) since the line before.
	EventDropped = "dropped"
	// EventClose ends a file: the gateway stopped, or the file was
	// rotated away.
	EventClose = "close"
)

// Digest is the SHA-256 of a line, without its newline.
type Digest [sha256.Size]byte

// String is d in hex, as the lines carry it.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// Genesis is the prev of a log's first line: no line before it.
var Genesis Digest

// maxText bounds a caller-chosen text written to a line (a tool name, a
// path), as the call log does.
const maxText = 200

// kind is what a record is.
type kind uint8

const (
	kindCall kind = iota
	kindOpen
	kindDropped
	kindClose
)

// record is one line to write, as the call handed it over; the writer
// formats it. Strings and errors are immutable and shared; args is the
// record's own copy.
type record struct {
	kind      kind
	start     time.Time
	dur       time.Duration
	requestID string
	door      string
	method    string
	tool, set string
	// subject and as are the caller's identities when authenticated.
	subject, as   toolcall.Subject
	authenticated bool
	peer          string
	peerAddr      net.Addr
	err           error
	bytesIn       int64
	bytesOut      int64
	digest        Digest
	hasDigest     bool
	args          []byte // with arguments: their text, the record's own copy
	argsOmitted   bool   // with arguments: left out, the queue holding too many
	// open, dropped and close lines.
	reason   string // open: start, reopened, truncated; close: shutdown, rotated
	count    int64  // dropped: records not written; close: calls written
	dropped  int64  // close: records dropped while the file was written
	torn     int    // open, dropped: bytes of a line cut short before it
	instance string
	version  string
	pid      int
}

// reset empties r for reuse, keeping its arguments' buffer.
func (r *record) reset() {
	args := r.args[:0]
	*r = record{args: args}
}

// appendLine appends r's line, without its newline, after prev and seq.
func appendLine(b []byte, r *record, prev Digest, seq int64) []byte {
	b = append(b, `{"prev":"`...)
	b = hex.AppendEncode(b, prev[:])
	b = append(b, `","seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"time":"`...)
	b = r.start.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","event":"`...)
	switch r.kind {
	case kindOpen:
		b = append(b, EventOpen...)
		b = append(b, '"')
		b = appendField(b, "reason", r.reason)
		b = appendField(b, "instance", r.instance)
		b = appendField(b, "version", r.version)
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, int64(r.pid), 10)
		b = appendTorn(b, r.torn)
	case kindDropped:
		b = append(b, EventDropped...)
		b = append(b, `","count":`...)
		b = strconv.AppendInt(b, r.count, 10)
		b = appendTorn(b, r.torn)
	case kindClose:
		b = append(b, EventClose...)
		b = append(b, '"')
		b = appendField(b, "reason", r.reason)
		b = append(b, `,"calls":`...)
		b = strconv.AppendInt(b, r.count, 10)
		b = append(b, `,"dropped":`...)
		b = strconv.AppendInt(b, r.dropped, 10)
	default:
		b = append(b, EventCall...)
		b = append(b, '"')
		b = appendCall(b, r)
	}
	return append(b, '}')
}

// appendCall appends a call's fields.
func appendCall(b []byte, r *record) []byte {
	b = appendField(b, "request_id", r.requestID)
	b = appendField(b, "door", r.door)
	b = appendField(b, "method", truncate(r.method))
	b = appendField(b, "tool", truncate(r.tool))
	if r.set != "" {
		b = appendField(b, "set", truncate(r.set))
	}
	b = append(b, `,"subject":`...)
	if r.authenticated {
		b = appendSubject(b, r.subject)
	} else {
		b = append(b, `""`...)
	}
	if r.authenticated && r.as.Source != "" {
		b = append(b, `,"as":`...)
		b = appendSubject(b, r.as)
	}
	peer := r.peer
	if peer == "" && r.peerAddr != nil {
		peer = r.peerAddr.String()
	}
	b = appendField(b, "source", peer)
	code, reason := outcome(r.err)
	b = appendField(b, "code", code.String())
	if reason != "" {
		b = appendField(b, "reason", reason)
	}
	b = append(b, `,"duration_us":`...)
	b = strconv.AppendInt(b, r.dur.Microseconds(), 10)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, r.bytesIn, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, r.bytesOut, 10)
	if r.hasDigest {
		b = append(b, `,"args_sha256":"`...)
		b = hex.AppendEncode(b, r.digest[:])
		b = append(b, '"')
	}
	switch {
	case r.argsOmitted:
		b = append(b, `,"arguments_omitted":true`...)
	case r.args != nil:
		b = append(b, `,"arguments":`...)
		if utf8.Valid(r.args) && jsontext.Valid(r.args) {
			b = appendCompact(b, r.args)
		} else {
			b = appendString(b, string(r.args)) // not JSON: as text
		}
	}
	return b
}

// appendSubject appends s as the text the policy and the call log know
// it by ("api-key:alice").
func appendSubject(b []byte, s toolcall.Subject) []byte {
	return appendString(b, s.String())
}

// appendTorn appends the torn field when a line was cut short.
func appendTorn(b []byte, torn int) []byte {
	if torn == 0 {
		return b
	}
	b = append(b, `,"torn":`...)
	return strconv.AppendInt(b, int64(torn), 10)
}

// appendField appends ,"name":"value".
func appendField(b []byte, name, value string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, value)
}

// outcome is err's code and its ErrorInfo reason ("" when it has none).
func outcome(err error) (codes.Code, string) {
	if err == nil {
		return codes.OK, ""
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return status.FromContextError(err).Code(), ""
		}
		return codes.Unknown, ""
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), ei.GetReason()
		}
	}
	return st.Code(), ""
}

// truncate cuts s to at most maxText bytes on a rune boundary, marking
// the cut.
func truncate(s string) string {
	if len(s) <= maxText {
		return s
	}
	cut := maxText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// appendString appends s as a JSON string (wire.AppendJSONString: the
// envelopes' encoder).
func appendString(b []byte, s string) []byte { return wire.AppendJSONString(b, s) }
