package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Stream formats, chosen by the request's Accept header.
const (
	ContentTypeNDJSON = "application/x-ndjson"
	ContentTypeSSE    = "text/event-stream"
)

// streamFormat picks the response format from Accept (negotiate):
// NDJSON, the default, or SSE; application/json, which generated clients
// send when errors are JSON, takes NDJSON. ok is false when Accept allows
// neither.
func streamFormat(accept string) (sse bool, ok bool) {
	mt, ok := negotiate(accept, ContentTypeNDJSON, ContentTypeSSE, mediaJSON)
	return mt == ContentTypeSSE, ok
}

// serveStream serves StreamTool: each chunk is written and flushed as it
// arrives, as NDJSON or Server-Sent Events.
func (a *API) serveStream(w http.ResponseWriter, r *http.Request, name string) {
	ctx := r.Context()
	sse, ok := streamFormat(r.Header.Get("Accept"))
	if !ok {
		notAcceptable(w, r, ContentTypeNDJSON, ContentTypeSSE)
		return
	}
	c := newCall(r, toolcall.OpStream)
	c.Name = name
	if err := toolSet(r, c); err != nil {
		a.httpError(ctx, w, r, err)
		return
	}
	if !a.readCall(w, r, c) {
		return
	}
	s := &httpStream{ctx: ctx, w: w, rc: http.NewResponseController(w), sse: sse, call: c,
		heartbeat: a.opts.SSEHeartbeat, log: a.opts.Logger}
	_, err := a.opts.Handler(ctx, c, s.Send)
	s.finish(err, func(err error) { setRequestID(w, c); a.httpError(ctx, w, r, err) }, a.m)
}

// httpStream writes one stream's chunks to the HTTP response.
type httpStream struct {
	ctx       context.Context
	w         http.ResponseWriter
	rc        *http.ResponseController
	sse       bool
	ids       bool           // SSE events carry the chunk's index as their id
	call      *toolcall.Call // for its request id
	heartbeat time.Duration
	log       *slog.Logger

	mu      sync.Mutex // guards the writer: Send, the pump and finish
	started bool       // the status line and the first chunk are written
	failed  error      // a write failed: the client is gone
	dirty   bool       // written but not yet flushed
	buf     []byte
	last    time.Time     // of the last write, for the heartbeat
	kick    chan struct{} // a chunk waits to be flushed
	stop    chan struct{}
	done    chan struct{}
}

// Send writes one chunk and flushes it.
func (s *httpStream) Send(c toolcall.Chunk) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return s.failed
	}
	s.start()
	b := s.buf[:0]
	if s.sse {
		if s.ids {
			b = append(b, "id: "...)
			b = strconv.AppendInt(b, c.Index, 10)
			b = append(b, '\n')
		}
		b = append(b, "event: chunk\ndata: "...)
	}
	b = appendChunk(b, c)
	if s.sse {
		b = append(b, "\n\n"...)
	} else {
		b = append(b, '\n')
	}
	s.buf = b
	if err := s.write(b, false); err != nil {
		return err
	}
	// The pump flushes: chunks that arrive while it waits for the lock
	// leave in one write instead of one each.
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// start writes the status line once, before the first chunk, and starts
// the pump that flushes chunks and sends SSE keep-alives. Callers hold mu.
func (s *httpStream) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	setRequestID(s.w, s.call)
	if s.sse {
		h.Set("Content-Type", ContentTypeSSE)
	} else {
		h.Set("Content-Type", ContentTypeNDJSON)
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // reverse proxies: do not buffer
	h.Del("Content-Length")
	s.w.WriteHeader(http.StatusOK)
	s.kick, s.stop, s.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go s.pump()
}

// write writes b, and flushes it when flush is set. Callers hold mu.
func (s *httpStream) write(b []byte, flush bool) error {
	if _, err := s.w.Write(b); err != nil {
		s.failed = status.Error(codes.Canceled, "the HTTP client went away")
		return s.failed
	}
	s.dirty = true
	s.last = time.Now()
	if flush {
		return s.flush()
	}
	return nil
}

// flush sends what was written. Callers hold mu.
func (s *httpStream) flush() error {
	if !s.dirty || s.failed != nil {
		return s.failed
	}
	s.dirty = false
	if err := s.rc.Flush(); err != nil {
		s.failed = status.Error(codes.Canceled, "the HTTP client went away")
	}
	return s.failed
}

// pump flushes written chunks as soon as it runs — a chunk never waits for
// another — and, on SSE streams, writes a comment when the stream has been
// quiet for a heartbeat interval, so proxies keep the connection open.
func (s *httpStream) pump() {
	defer close(s.done)
	var tick <-chan time.Time
	if s.sse && s.heartbeat > 0 {
		t := time.NewTicker(s.heartbeat / 2)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case <-s.ctx.Done():
			return
		case <-s.kick:
			s.mu.Lock()
			_ = s.flush()
			s.mu.Unlock()
		case now := <-tick:
			s.mu.Lock()
			if s.failed == nil && now.Sub(s.last) >= s.heartbeat {
				_ = s.write([]byte(": keep-alive\n\n"), true)
			}
			s.mu.Unlock()
		}
	}
}

// finish ends the response: an error before the first chunk is an HTTP
// error status with the bare Status body (httpErr), exactly like unary
// calls; after it, the last NDJSON line or an SSE "error" event carries
// the same Status. A stream that ended well gets SSE's "done" event.
func (s *httpStream) finish(err error, httpErr func(error), m runtime.Marshaler) {
	s.mu.Lock()
	started := s.started
	if !started && err != nil {
		s.mu.Unlock()
		httpErr(err)
		return
	}
	s.start()
	if s.failed == nil {
		var b []byte
		switch {
		case err != nil:
			body, merr := m.Marshal(toolcall.EnsureErrorInfo(status.Convert(err)).Proto())
			if merr != nil {
				body = []byte(`{"code":13,"message":"the stream failed"}`)
			}
			if s.sse {
				b = append(append(append(b, "event: error\ndata: "...), body...), "\n\n"...)
			} else {
				b = append(append(b, body...), '\n')
			}
		case s.sse:
			b = []byte("event: done\ndata: {}\n\n")
		}
		if len(b) > 0 {
			_ = s.write(b, false)
		}
		_ = s.flush()
	}
	stop, done := s.stop, s.done
	s.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// appendChunk writes c as the JSON the gateway's marshaler writes a
// StreamToolResponse (proto names, defaults included, int64 as a string),
// without reflection: it runs for every chunk of every stream.
func appendChunk(b []byte, c toolcall.Chunk) []byte {
	b = append(b, `{"output":`...)
	b = wire.AppendJSONString(b, c.Text)
	b = append(b, `,"index":"`...)
	b = strconv.AppendInt(b, c.Index, 10)
	b = append(b, `","last":`...)
	b = strconv.AppendBool(b, c.Last)
	return append(b, '}')
}
