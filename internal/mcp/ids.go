package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/randid"
)

// A JSON-RPC client matches each answer to its request by the id, so every
// answer carries the id exactly as the request wrote it: the fast path and
// the tasks surface copy its bytes. The SDK does not: it reads a numeric id
// as a float64 and writes it back as an integer, so 9007199254740993 comes
// back 9007199254740992, 1.5 as 1, and an id past 2^63 as
// -9223372036854775808 — the id of another request, possibly. What the
// SDK would not echo byte for byte it therefore never sees: the request it
// is given carries a surrogate — a string of the gateway's own, random per
// request — and every message it writes has the surrogate replaced by the
// original again (idRestorer). Progress notifications name the request by
// its progressToken, which the SDK reads the same way: they carry the
// token as written (request.progressToken).
//
// Ids that are not a string or a number (null, objects, arrays, booleans)
// are left to the SDK, which refuses or ignores them as it does.

// echoable reports whether id, a JSON value, is one an answer echoes: a
// string or a number.
func echoable(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	c := id[0]
	return c == '"' || c == '-' || ('0' <= c && c <= '9')
}

// sdkEchoes reports whether the SDK writes id back byte for byte: an
// integer written plainly that a float64 holds exactly, or a string with
// nothing its encoder writes otherwise (no escapes; valid UTF-8 without
// U+2028 or U+2029).
func sdkEchoes(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	if id[0] == '"' {
		s := id[1 : len(id)-1]
		return bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) && !bytes.Contains(s, []byte("\u2028")) && !bytes.Contains(s, []byte("\u2029"))
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil && n >= -1<<53 && n <= 1<<53 && strconv.FormatInt(n, 10) == string(id)
}

// idMember is a member "id" of a request object: its value, and where the
// value starts in the body.
type idMember struct {
	value json.RawMessage
	start int
}

// errNotObject: a body that is not a JSON object.
var errNotObject = errors.New("not a JSON object")

// idMembers returns the members "id" of body's top-level object (the key
// compared once unescaped, as the SDK compares it; a key given twice is
// there twice).
func idMembers(body []byte) ([]idMember, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errNotObject
	}
	var ids []idMember
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if key == "id" {
			ids = append(ids, idMember{value: v, start: int(dec.InputOffset()) - len(v)})
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, errNotObject
	}
	return ids, nil
}

// requestID is the id of the JSON-RPC request in body, as written, or
// null when it has none that an answer echoes (a refusal then answers
// with id null, as JSON-RPC asks when the id cannot be determined).
func requestID(body []byte) json.RawMessage {
	ids, _ := idMembers(body)
	return lastID(ids)
}

// lastID is the last of ids (the one decoders take), or null.
func lastID(ids []idMember) json.RawMessage {
	if len(ids) == 0 || !echoable(ids[len(ids)-1].value) {
		return json.RawMessage("null")
	}
	return ids[len(ids)-1].value
}

// surrogate is an id the SDK is given in place of the original.
type surrogate struct {
	stand, original []byte
}

// standIn returns body, whose members "id" are ids (idMembers), with
// every id the SDK would not echo exactly replaced by a surrogate, and
// the surrogates; none (nil) leaves body as it is.
func standIn(body []byte, ids []idMember) ([]byte, []surrogate) {
	var subs []surrogate
	var out []byte
	last := 0
	for _, id := range ids {
		if !echoable(id.value) || sdkEchoes(id.value) {
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(body)+32*len(ids))
		}
		stand := []byte(`"toolgate-id-` + randid.New() + `"`)
		subs = append(subs, surrogate{stand: stand, original: id.value})
		out = append(append(out, body[last:id.start]...), stand...)
		last = id.start + len(id.value)
	}
	if subs == nil {
		return body, nil
	}
	return append(out, body[last:]...), subs
}

// withSurrogates gives the SDK r, whose body's members "id" are ids, with
// the surrogates of standIn, and returns the writer that puts the
// originals back in what it writes.
func withSurrogates(w http.ResponseWriter, r *http.Request, body []byte, ids []idMember) http.ResponseWriter {
	sdkBody, subs := standIn(body, ids)
	if subs == nil {
		return w
	}
	r.Body = io.NopCloser(bytes.NewReader(sdkBody))
	r.ContentLength = int64(len(sdkBody))
	return &idRestorer{ResponseWriter: w, subs: subs}
}

// idRestorer writes the SDK's answer with each surrogate id replaced by
// the original. The SDK writes each message — an event of a stream, or a
// JSON body — with one Write, so a surrogate is never split between two
// (TestIDsEchoedExactly holds it to that).
type idRestorer struct {
	http.ResponseWriter
	subs []surrogate
}

func (w *idRestorer) WriteHeader(code int) {
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

func (w *idRestorer) Write(b []byte) (int, error) {
	out := b
	for _, s := range w.subs {
		if bytes.Contains(out, s.stand) {
			out = bytes.ReplaceAll(out, s.stand, s.original)
		}
	}
	if _, err := w.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush flushes the event stream the SDK writes.
func (w *idRestorer) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// progressToken is the progressToken of the request in body as written,
// or nil.
func progressToken(body []byte) json.RawMessage {
	if !bytes.Contains(body, []byte("progressToken")) {
		return nil
	}
	var top, params, meta map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || json.Unmarshal(top["params"], &params) != nil || json.Unmarshal(params["_meta"], &meta) != nil {
		return nil
	}
	if t := meta["progressToken"]; echoable(t) {
		return t
	}
	return nil
}
