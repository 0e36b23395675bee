package connectapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"connectrpc.com/connect"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/gen/toolgate/v1/toolgatev1connect"
	"github.com/toolgate/toolgate/internal/apiproto"
	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The door's commonest call — InvokeTool in the Connect protocol's unary
// form with a JSON body, as browsers and Connect clients make it, or a
// binary one, connect-go's default — is served here without connect-go:
// the body is read once and the request's fields taken from its text (or
// from the message protobuf decodes), the answer written straight from
// the result.
// What it answers is what connect-go answers for the same request: the
// same headers (Content-Type, Accept-Encoding, gzip for an answer past
// compressMinBytes when the client accepts it, X-Request-Id), the same
// JSON message, errors written by connect-go's ErrorWriter as the handler
// writes them. Anything else — another content type or codec, a
// compressed body, a protocol version or timeout connect-go refuses, a
// body with escapes in its keys, a timeout not in seconds, a number a
// double does not hold, two ways of giving the arguments — goes to
// connect-go with the body as it was, which decodes it in full and
// answers or refuses it as it always has.

// fastBodyMax bounds the body the fast path reads; a larger one (or one
// past the message limit) goes to connect-go.
const fastBodyMax = 64 << 10

// Shared header values: net/http only reads a header's values.
var (
	jsonContentType  = []string{"application/json"}
	protoContentType = []string{"application/proto"}
	gzipEncoding     = []string{"gzip"}
)

// serveInvoke serves r when it is a unary Connect InvokeTool call with a
// JSON body the fast path reads, or a binary (protobuf) one, and reports
// whether it did. When it does not, r is as it came (its body rewound)
// for connect-go to serve.
func (s *service) serveInvoke(w http.ResponseWriter, r *http.Request) bool {
	h := r.Header
	if r.Method != http.MethodPost {
		return false
	}
	var binary bool
	switch ct := h["Content-Type"]; {
	case oneValue(ct, "application/json"):
	case oneValue(ct, "application/proto"):
		binary = true
	default:
		return false
	}
	if v := first(h["Connect-Protocol-Version"]); v != "" && v != "1" {
		return false
	}
	if v := first(h["Content-Encoding"]); v != "" && v != "identity" {
		return false
	}
	timeout, hasTimeout, ok := connectTimeout(first(h["Connect-Timeout-Ms"]))
	if !ok {
		return false
	}
	limit := int64(fastBodyMax)
	if s.maxMessage > 0 && s.maxMessage < limit {
		limit = s.maxMessage
	}
	if r.ContentLength > limit {
		return false
	}
	var data []byte
	var err error
	if r.ContentLength >= 0 {
		data, err = httpcall.ReadBody(r) // net/http stops at the declared length
	} else {
		data, err = io.ReadAll(io.LimitReader(r.Body, limit+1))
	}
	if err != nil || int64(len(data)) > limit {
		rewind(r, data, err)
		return false
	}
	c := &toolcall.Call{Op: toolcall.OpInvoke, Header: httpcall.Header(h), Peer: r.RemoteAddr, TLS: r.TLS}
	var msg *toolgatev1.InvokeToolRequest
	switch {
	case binary:
		// connect-go's codec for application/proto: proto.Unmarshal.
		msg = &toolgatev1.InvokeToolRequest{}
		if proto.Unmarshal(data, msg) != nil {
			rewind(r, data, nil)
			return false
		}
	case !decodeInvoke(data, c):
		rewind(r, data, nil)
		return false
	}
	// connect-go gives the request's header its Host; the call sees it.
	h["Host"] = []string{r.Host}
	gz := acceptsGzip(first(h["Accept-Encoding"]))
	out := w.Header()
	out["Content-Type"] = jsonContentType
	if binary {
		out["Content-Type"] = protoContentType
	}
	out["Accept-Encoding"] = gzipEncoding // the compressions the door takes
	if binary {
		// What the door's InvokeTool does with the message.
		c.Name = msg.GetName()
		if err := apiproto.Request(c, msg.GetArguments(), msg.GetArgumentsJson(), msg.GetTimeout()); err != nil {
			s.writeError(w, r, c, connectError(err))
			return true
		}
	}
	ctx := r.Context()
	if hasTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res, err := s.h(ctx, c, nil)
	if err != nil {
		// writeError puts the request id in the error's metadata, which
		// connect-go writes as a header (once, as connect-go alone does):
		// the answer's header takes it only once the answer is written.
		s.writeError(w, r, c, connectError(err))
		return true
	}
	buf := bufPool.Get().(*[]byte)
	defer bufPool.Put(buf)
	var body []byte
	if binary {
		body, err = proto.MarshalOptions{}.MarshalAppend((*buf)[:0],
			&toolgatev1.InvokeToolResponse{Output: res.Output, OutputJson: apiproto.JSONValue(res.Output)})
	} else {
		body, err = appendInvokeResponse((*buf)[:0], res.Output)
	}
	if err != nil {
		s.writeError(w, r, c, connect.NewError(connect.CodeInternal, fmt.Errorf("marshal message: %w", err)))
		return true
	}
	if c.RequestID != "" {
		out["X-Request-Id"] = []string{c.RequestID}
	}
	if cap(body) <= maxPooled {
		*buf = body
	}
	if gz && len(body) >= compressMinBytes {
		writeGzip(w, body)
		return true
	}
	_, _ = w.Write(body)
	return true
}

// writeError answers err as connect-go's handler does: the error's
// metadata and the request id in the header, the Connect JSON error body.
func (s *service) writeError(w http.ResponseWriter, r *http.Request, c *toolcall.Call, err error) {
	var ce *connect.Error
	if errors.As(err, &ce) && c.RequestID != "" {
		ce.Meta().Set("X-Request-Id", c.RequestID)
	}
	_ = s.errs.Write(w, r, err)
}

// first is a header's first value, as connect-go reads headers.
func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func oneValue(vs []string, want string) bool { return len(vs) == 1 && vs[0] == want }

// connectTimeout reads Connect-Timeout-Ms as connect-go does; ok is false
// for a value it refuses.
func connectTimeout(v string) (d time.Duration, set, ok bool) {
	if v == "" {
		return 0, false, true
	}
	if len(v) > 10 {
		return 0, false, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return 0, false, false
	}
	return time.Duration(ms) * time.Millisecond, true, true
}

// acceptsGzip reports whether connect-go would answer a client sending
// Accept-Encoding v in gzip: the first name it knows is gzip.
func acceptsGzip(v string) bool {
	if v == "" {
		return false
	}
	for name := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		if name == "gzip" {
			return true
		}
	}
	return false
}

// rewind puts back the body read so far for connect-go to read, followed
// by the error that stopped the reading, or by the rest of the body.
func rewind(r *http.Request, data []byte, err error) {
	var rest io.Reader = r.Body
	if err != nil {
		rest = errReader{err}
	}
	r.Body = rewound{Reader: io.MultiReader(bytes.NewReader(data), rest), Closer: r.Body}
}

type rewound struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// maxPooled bounds the answer buffers kept for reuse.
const maxPooled = 16 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

var gzipPool = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

// writeGzip writes body gzip-compressed, as connect-go's compressor
// (gzip's default level) does.
func writeGzip(w http.ResponseWriter, body []byte) {
	w.Header()["Content-Encoding"] = gzipEncoding
	zw := gzipPool.Get().(*gzip.Writer)
	zw.Reset(w)
	_, _ = zw.Write(body)
	_ = zw.Close()
	zw.Reset(io.Discard)
	gzipPool.Put(zw)
}

// appendInvokeResponse writes the InvokeToolResponse of output as
// connect-go's JSON codec (protojson) does: "output" when it is not empty,
// "outputJson" when it is a JSON value. A plain text output is written
// here; a JSON one goes through protojson with the value decoded, as
// before.
func appendInvokeResponse(b []byte, output string) ([]byte, error) {
	if apiproto.IsJSON(output) || !utf8.ValidString(output) {
		msg := &toolgatev1.InvokeToolResponse{Output: output, OutputJson: apiproto.JSONValue(output)}
		return protojson.MarshalOptions{}.MarshalAppend(b, msg)
	}
	if output == "" {
		return append(b, "{}"...), nil
	}
	b = append(b, `{"output":`...)
	b = wire.AppendJSONString(b, output)
	return append(b, '}'), nil
}

// decodeInvoke reads an InvokeToolRequest's JSON form into c as
// connect-go's codec (protojson, unknown fields dropped) and the door's
// InvokeTool do. It returns false for a body it does not read exactly
// so, which connect-go is then given.
func decodeInvoke(data []byte, c *toolcall.Call) bool {
	body, err := jsontext.Compact(data)
	if err != nil {
		return false // not an object, or refused: connect-go says why
	}
	var buf [4]jsontext.Member
	members, ok := jsontext.Members(body, buf[:0])
	if !ok {
		return false
	}
	var args []byte
	var argsJSON string
	var seenArgsJSON bool
	for _, m := range members {
		if bytes.IndexByte(m.Key, '\\') >= 0 {
			return false // a key with escapes may name a field
		}
		key, v := string(m.Key), m.Value
		switch key {
		case "name", "arguments", "timeout", "argumentsJson", "arguments_json":
		default:
			continue // unknown: dropped
		}
		if string(v) == "null" {
			if key == "argumentsJson" || key == "arguments_json" {
				if seenArgsJSON {
					return false
				}
				seenArgsJSON = true
			}
			continue // not set
		}
		switch key {
		case "name":
			s, ok := unquote(v)
			if !ok {
				return false
			}
			c.Name = s
		case "arguments":
			if v[0] != '{' {
				return false
			}
			if args, ok = canonicalArgs(v); !ok {
				return false
			}
		case "argumentsJson", "arguments_json":
			if seenArgsJSON {
				return false // both names: protojson refuses it
			}
			seenArgsJSON = true
			if argsJSON, ok = unquote(v); !ok {
				return false
			}
		case "timeout":
			d, ok := secondsDuration(v)
			if !ok {
				return false
			}
			c.Timeout, c.TimeoutSet = d, true
		}
	}
	switch {
	case argsJSON != "":
		if args != nil && string(args) != "{}" {
			return false // both: refused, as connect-go's path refuses it
		}
		c.Args = []byte(argsJSON)
	case args != nil:
		c.Args = args
	default:
		c.Args = []byte("{}")
	}
	return true
}

// secondsDuration reads a google.protobuf.Duration's JSON form when it is
// whole seconds with up to nine decimals, "1.5s", and within what a
// Duration holds.
func secondsDuration(v []byte) (time.Duration, bool) {
	if len(v) < 4 || v[0] != '"' || v[len(v)-2] != 's' || v[len(v)-1] != '"' {
		return 0, false
	}
	num := v[1 : len(v)-2]
	whole, frac, dot := bytes.Cut(num, []byte{'.'})
	if len(whole) == 0 || len(whole) > 11 || (dot && (len(frac) == 0 || len(frac) > 9)) {
		return 0, false
	}
	var secs, nanos int64
	for _, ch := range whole {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		secs = secs*10 + int64(ch-'0')
	}
	for i := range 9 {
		nanos *= 10
		if i < len(frac) {
			if frac[i] < '0' || frac[i] > '9' {
				return 0, false
			}
			nanos += int64(frac[i] - '0')
		}
	}
	d := durationpb.Duration{Seconds: secs, Nanos: int32(nanos)}
	if d.CheckValid() != nil {
		return 0, false
	}
	return d.AsDuration(), true
}

// canonicalArgs writes the arguments object obj (compact, from
// jsontext.Compact) as apiproto.Arguments writes the google.protobuf.Struct
// protojson decodes it into: keys sorted, numbers as doubles. ok is false
// for what that path refuses or this one does not read (escapes it does
// not decode, a number a double does not hold, nesting past the limit).
func canonicalArgs(obj []byte) ([]byte, bool) {
	if string(obj) == "{}" {
		return []byte("{}"), true
	}
	b, rest, ok := appendCanonical(make([]byte, 0, len(obj)+8), obj, 0)
	return b, ok && len(rest) == 0
}

// member is one member of an object being sorted.
type member struct {
	key   string
	value []byte
}

// appendCanonical writes the value at the start of data and returns what
// follows it. depth counts as apiproto's appendStruct counts.
func appendCanonical(b, data []byte, depth int) (out, rest []byte, ok bool) {
	switch data[0] {
	case '{':
		if depth > jsontext.MaxDepth {
			return nil, nil, false
		}
		var stack [8]member
		ms := stack[:0]
		data = data[1:]
		for data[0] != '}' {
			kv, after := str(data)
			key, ok := unquote(kv)
			if !ok {
				return nil, nil, false
			}
			v, after, ok := skip(after[1:])
			if !ok {
				return nil, nil, false
			}
			ms = append(ms, member{key, v})
			data = after
			if data[0] == ',' {
				data = data[1:]
			}
		}
		slices.SortFunc(ms, func(x, y member) int { return strings.Compare(x.key, y.key) })
		b = append(b, '{')
		for i, m := range ms {
			if i > 0 {
				b = append(b, ',')
			}
			b = wire.AppendJSONString(b, m.key)
			b = append(b, ':')
			var ok bool
			if b, _, ok = appendCanonical(b, m.value, depth+1); !ok {
				return nil, nil, false
			}
		}
		return append(b, '}'), data[1:], true
	case '[':
		if depth > jsontext.MaxDepth {
			return nil, nil, false
		}
		b = append(b, '[')
		data = data[1:]
		for i := 0; data[0] != ']'; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, data, ok = appendCanonical(b, data, depth+1); !ok {
				return nil, nil, false
			}
			if data[0] == ',' {
				data = data[1:]
			}
		}
		return append(b, ']'), data[1:], true
	case '"':
		s, after := str(data)
		v, ok := unquote(s)
		if !ok {
			return nil, nil, false
		}
		return wire.AppendJSONString(b, v), after, true
	case 't':
		return append(b, "true"...), data[4:], true
	case 'f':
		return append(b, "false"...), data[5:], true
	case 'n':
		return append(b, "null"...), data[4:], true
	}
	n := 0
	for n < len(data) && data[n] != ',' && data[n] != '}' && data[n] != ']' {
		n++
	}
	f, err := strconv.ParseFloat(string(data[:n]), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, nil, false // protojson refuses a number past a double
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.AppendInt(b, int64(f), 10), data[n:], true
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64), data[n:], true
}

// skip splits compact JSON text after its first value.
func skip(data []byte) (v, rest []byte, ok bool) {
	switch data[0] {
	case '"':
		s, rest := str(data)
		return s, rest, true
	case '{', '[':
		depth := 0
		for i := 0; i < len(data); i++ {
			switch data[i] {
			case '"':
				_, rest := str(data[i:])
				i = len(data) - len(rest) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return data[:i+1], data[i+1:], true
				}
			}
		}
		return nil, nil, false
	}
	i := 0
	for i < len(data) && data[i] != ',' && data[i] != '}' && data[i] != ']' {
		i++
	}
	return data[:i], data[i:], i > 0
}

// str returns the JSON string at the start of data (valid JSON), quotes
// included, and what follows it.
func str(data []byte) (s, rest []byte) {
	for i := 1; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return data[:i+1], data[i+1:]
		}
	}
	return data, nil
}

// unquote decodes the JSON string q (quotes included, valid JSON and
// UTF-8). ok is false for a value that is not a string, and for an
// escaped UTF-16 surrogate that is not half of a valid pair, which is
// left to protojson.
func unquote(q []byte) (string, bool) {
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return "", false
	}
	q = q[1 : len(q)-1]
	i := bytes.IndexByte(q, '\\')
	if i < 0 {
		return string(q), true
	}
	out := make([]byte, 0, len(q))
	for {
		out = append(out, q[:i]...)
		q = q[i:]
		if len(q) < 2 {
			return "", false
		}
		switch q[1] {
		case '"', '\\', '/':
			out = append(out, q[1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(q[2:])
			if !ok {
				return "", false
			}
			if utf16.IsSurrogate(r) {
				if len(q) < 12 || q[6] != '\\' || q[7] != 'u' {
					return "", false
				}
				r2, ok := hex4(q[8:])
				if !ok {
					return "", false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", false
				}
				q = q[6:]
			}
			out = utf8.AppendRune(out, r)
			q = q[4:]
		default:
			return "", false
		}
		q = q[2:]
		if i = bytes.IndexByte(q, '\\'); i < 0 {
			return string(append(out, q...)), true
		}
	}
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

// invokePath is the path of InvokeTool.
const invokePath = toolgatev1connect.ToolServiceInvokeToolProcedure
