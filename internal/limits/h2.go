package limits

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// Defaults of the HTTP/2 bounds.
const (
	// DefaultMaxConcurrentStreams is how many streams a client may have
	// open on one HTTP/2 connection at once.
	DefaultMaxConcurrentStreams = 250
	// DefaultMaxResets is how many streams a client may reset
	// (RST_STREAM) on one connection in a BudgetWindow within
	// PrematureReset of opening them.
	DefaultMaxResets = 200
	// DefaultMaxPings is how many PINGs a client may send on one
	// connection in a BudgetWindow beyond those it earns: every HEADERS
	// or DATA frame the gateway sends earns the client its budget back,
	// as gRPC's keepalive policy forgives pings while data flows (flow
	// control's bandwidth probes ping as answers arrive).
	DefaultMaxPings = 100
	// DefaultMaxSettings is how many SETTINGS frames a client may send on
	// one connection in a BudgetWindow.
	DefaultMaxSettings = 100
	// BudgetWindow is the window of the per-connection frame budgets: a
	// budget refills at its size per window, and holds at most its size.
	BudgetWindow = 10 * time.Second
	// PrematureReset is how young a stream's reset must be to count
	// against MaxResets: rapid reset opens streams and cancels them at
	// once, while a client's deadline or cancel ends an older call.
	PrematureReset = time.Second
	// recentStreams is how many of its newest streams a connection
	// remembers the opening time of, to tell a premature reset.
	recentStreams = 256
)

// HTTP2 bounds each HTTP/2 connection of both listeners (gRPC; HTTP, h2c
// and over TLS). A client over a frame budget is sent GOAWAY with
// ENHANCE_YOUR_CALM and its connection is closed; its calls in flight on
// it end. In each budget 0 means the default and a negative number no
// bound.
type HTTP2 struct {
	// MaxConcurrentStreams is advertised in SETTINGS and enforced by the
	// servers: streams over it are refused (REFUSED_STREAM).
	MaxConcurrentStreams int
	// MaxResets, MaxPings and MaxSettings are the client's budgets of
	// RST_STREAM (of streams younger than PrematureReset), PING (not
	// acknowledgements) and SETTINGS (not acknowledgements) frames per
	// connection and BudgetWindow.
	MaxResets   int
	MaxPings    int
	MaxSettings int
	// CalmHold is how long the next connections of a client sent away
	// wait before they are read (h2hold.go): doubled with each closing
	// within BudgetWindow, up to 8×. Unlike the budgets, 0 means none:
	// the gateway's flag gives DefaultCalmHold.
	CalmHold time.Duration
}

func (h HTTP2) withDefaults() HTTP2 {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&h.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	def(&h.MaxResets, DefaultMaxResets)
	def(&h.MaxPings, DefaultMaxPings)
	def(&h.MaxSettings, DefaultMaxSettings)
	return h
}

// Streams is the concurrent streams bound the servers advertise; 0: none
// (the largest value for a server that wants one).
func (h HTTP2) Streams() uint32 {
	h = h.withDefaults()
	if h.MaxConcurrentStreams < 0 {
		return 0
	}
	return uint32(h.MaxConcurrentStreams)
}

// ServerConfig is net/http's HTTP/2 configuration for h.
func (h HTTP2) ServerConfig() *http.HTTP2Config {
	n := int(h.Streams())
	if n == 0 {
		n = 1<<31 - 1 // net/http's 0 is its default
	}
	return &http.HTTP2Config{MaxConcurrentStreams: n}
}

// HTTP/2 frame types and flags the meter reads (RFC 9113 §6).
const (
	frameData     = 0x0
	frameHeaders  = 0x1
	frameRST      = 0x3
	frameSettings = 0x4
	framePing     = 0x6
	frameGoAway   = 0x7
	flagAck       = 0x1
	// errEnhanceYourCalm is GOAWAY's error code for a peer that
	// generates excessive load (RFC 9113 §7).
	errEnhanceYourCalm = 0xb
	frameHeaderLen     = 9
)

// clientPreface opens every HTTP/2 connection from a client.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// ErrCalm is what reading a connection closed for going over an HTTP/2
// frame budget fails with.
var ErrCalm = errors.New("HTTP/2 connection closed: the client went over a frame budget (ENHANCE_YOUR_CALM)")

// Meter is a listener's HTTP/2 frame meter: it reads the frames clients
// send on each connection as they pass, and closes (GOAWAY
// ENHANCE_YOUR_CALM) a connection whose client goes over a budget. What
// is not HTTP/2 (HTTP/1.1 on the HTTP listener) passes unread. It costs a
// connection a few words and a frame header's parse; payloads are not
// copied.
type Meter struct {
	lim    HTTP2
	log    *slog.Logger
	h2only bool // the listener speaks HTTP/2 alone (gRPC)
	calmed atomic.Int64
	held   atomic.Int64
	holds  holds
}

// NewMeter is a meter of h's budgets; h2only says the listener speaks
// nothing but HTTP/2 (gRPC), so the server may write before the client's
// preface is read. Closed connections are logged on log (nil: not
// logged), which should be rate-limited (ratelog).
func NewMeter(h HTTP2, log *slog.Logger, h2only bool) *Meter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Meter{lim: h.withDefaults(), log: log, h2only: h2only}
	m.holds.base = m.lim.CalmHold
	return m
}

// Calmed is how many connections the meter has closed.
func (m *Meter) Calmed() int64 { return m.calmed.Load() }

// Held is how many connections the meter has held, their peer sent away
// before (h2hold.go).
func (m *Meter) Held() int64 { return m.held.Load() }

// holdFor is the hold of a new connection c; nil when its peer is not
// held.
func (m *Meter) holdFor(c net.Conn) *hold {
	until := m.holds.until(peerOf(c), time.Now())
	if until.IsZero() {
		return nil
	}
	m.held.Add(1)
	return newHold(until)
}

// Listener meters every connection l accepts.
func (m *Meter) Listener(l net.Listener) net.Listener { return meteredListener{Listener: l, m: m} }

// Conn meters c.
func (m *Meter) Conn(c net.Conn) net.Conn {
	mc := &meteredConn{Conn: c, m: m, hold: m.holdFor(c)}
	now := time.Now()
	mc.resets = newBudget(m.lim.MaxResets, now)
	mc.pings = newBudget(m.lim.MaxPings, now)
	mc.settings = newBudget(m.lim.MaxSettings, now)
	if m.h2only {
		mc.mode.Store(modeH2)
	}
	return mc
}

// Credentials are c with the meter over each connection after its
// handshake, where the frames are in the clear: for a gRPC server with
// TLS.
func (m *Meter) Credentials(c credentials.TransportCredentials) credentials.TransportCredentials {
	return meteredCreds{TransportCredentials: c, m: m}
}

type meteredListener struct {
	net.Listener
	m *Meter
}

func (l meteredListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.m.Conn(c), nil
}

type meteredCreds struct {
	credentials.TransportCredentials
	m *Meter
}

func (c meteredCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if h := c.m.holdFor(raw); h != nil {
		h.wait() // a held peer's handshake waits too: it is the costly part
	}
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, info, err
	}
	return c.m.Conn(conn), info, nil
}

func (c meteredCreds) Clone() credentials.TransportCredentials {
	return meteredCreds{TransportCredentials: c.TransportCredentials.Clone(), m: c.m}
}

// A connection's mode: still reading the preface, HTTP/2, or not HTTP/2.
const (
	modePreface int32 = iota
	modeH2
	modeOther
)

// budget is a token bucket: size tokens, refilled at size per
// BudgetWindow. Only the connection's reader uses it.
type budget struct {
	size   float64 // <= 0: no bound
	tokens float64
	last   time.Time
}

func newBudget(size int, now time.Time) budget {
	return budget{size: float64(size), tokens: float64(size), last: now}
}

// take spends a token; false when there is none.
func (b *budget) take(now time.Time) bool {
	if b.size <= 0 {
		return true
	}
	if b.tokens < 1 {
		b.tokens = min(b.size, b.tokens+now.Sub(b.last).Seconds()*b.size/BudgetWindow.Seconds())
		b.last = now
		if b.tokens < 1 {
			return false
		}
	}
	b.tokens--
	return true
}

// meteredConn reads the client's frame headers as the server reads the
// connection, and the server's as it writes them (to know when a GOAWAY
// can be written between two frames, and when the client earned its
// pings back).
type meteredConn struct {
	net.Conn
	m    *Meter
	mode atomic.Int32

	// The reader's, touched by the server's reading goroutine alone.
	preface  int                  // bytes of the preface seen
	hdr      [frameHeaderLen]byte // a frame header read in part
	hn       int
	skip     uint32 // payload bytes of the current frame still to pass
	last     uint32 // highest stream the client opened
	recent   *[recentStreams]opened
	rn       int // streams put in recent
	resets   budget
	pings    budget
	settings budget

	// The writer's, under wmu.
	wmu   sync.Mutex
	whdr  [frameHeaderLen]byte
	wn    int
	wskip uint32

	earned atomic.Bool // the server sent HEADERS or DATA since the last ping
	calm   atomic.Bool // going over a budget closed the connection
	// hold: the peer was sent away before; the first read waits it out.
	hold *hold
}

func (c *meteredConn) Read(p []byte) (int, error) {
	if c.calm.Load() {
		return 0, ErrCalm
	}
	if h := c.hold; h != nil && !h.wait() {
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Read(p)
	if n > 0 && c.mode.Load() != modeOther {
		if what := c.scan(p[:n]); what != "" {
			c.calmDown(what)
			return 0, ErrCalm
		}
	}
	return n, err
}

// Close closes the connection, and ends its hold.
func (c *meteredConn) Close() error {
	if h := c.hold; h != nil {
		h.close()
	}
	return c.Conn.Close()
}

// scan reads the frame headers in b; it returns what went over its
// budget, "" when nothing did.
func (c *meteredConn) scan(b []byte) string {
	for len(b) > 0 {
		switch {
		case c.preface < len(clientPreface):
			k := min(len(clientPreface)-c.preface, len(b))
			if string(b[:k]) != clientPreface[c.preface:c.preface+k] {
				c.mode.Store(modeOther) // not HTTP/2: nothing to meter
				return ""
			}
			c.preface += k
			b = b[k:]
			if c.preface == len(clientPreface) {
				c.mode.Store(modeH2)
			}
		case c.skip > 0:
			k := uint32(min(uint64(c.skip), uint64(len(b))))
			c.skip -= k
			b = b[k:]
		default:
			k := copy(c.hdr[c.hn:], b)
			c.hn += k
			b = b[k:]
			if c.hn < frameHeaderLen {
				return ""
			}
			c.hn = 0
			c.skip = uint32(c.hdr[0])<<16 | uint32(c.hdr[1])<<8 | uint32(c.hdr[2])
			if what := c.frame(c.hdr[3], c.hdr[4], binary.BigEndian.Uint32(c.hdr[5:9])&(1<<31-1)); what != "" {
				return what
			}
		}
	}
	return ""
}

// frame counts one of the client's frames against its budgets.
func (c *meteredConn) frame(typ, flags byte, stream uint32) string {
	switch typ {
	case frameHeaders:
		if stream > c.last { // a new stream, not trailers
			c.last = stream
			if c.resets.size > 0 {
				c.opened(stream)
			}
		}
	case frameRST:
		if now := time.Now(); c.premature(stream, now) && !c.resets.take(now) {
			return "stream resets"
		}
	case framePing:
		if flags&flagAck != 0 {
			return ""
		}
		if c.earned.Swap(false) {
			c.pings.tokens = max(c.pings.tokens, c.pings.size)
		}
		if !c.pings.take(time.Now()) {
			return "pings"
		}
	case frameSettings:
		if flags&flagAck == 0 && !c.settings.take(time.Now()) {
			return "settings"
		}
	}
	return ""
}

// opened is a stream's opening time.
type opened struct {
	stream uint32
	at     time.Time
}

// opened notes that the client opened stream now.
func (c *meteredConn) opened(stream uint32) {
	if c.recent == nil {
		c.recent = new([recentStreams]opened)
	}
	c.recent[c.rn%recentStreams] = opened{stream, time.Now()}
	c.rn++
}

// premature reports whether a reset of stream at now is premature: the
// stream was opened less than PrematureReset ago. The newest streams
// are looked at first, back to the first older than that.
func (c *meteredConn) premature(stream uint32, now time.Time) bool {
	for i := 1; i <= min(c.rn, recentStreams); i++ {
		o := &c.recent[(c.rn-i)%recentStreams]
		if now.Sub(o.at) >= PrematureReset {
			return false
		}
		if o.stream == stream {
			return true
		}
	}
	return false
}

func (c *meteredConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.mode.Load() == modeH2 {
		c.scanWrite(p)
	}
	return c.Conn.Write(p)
}

// scanWrite follows the server's frames, to know when it sends answers
// and where its frames end.
func (c *meteredConn) scanWrite(b []byte) {
	for len(b) > 0 {
		if c.wskip > 0 {
			k := uint32(min(uint64(c.wskip), uint64(len(b))))
			c.wskip -= k
			b = b[k:]
			continue
		}
		k := copy(c.whdr[c.wn:], b)
		c.wn += k
		b = b[k:]
		if c.wn < frameHeaderLen {
			return
		}
		c.wn = 0
		c.wskip = uint32(c.whdr[0])<<16 | uint32(c.whdr[1])<<8 | uint32(c.whdr[2])
		if t := c.whdr[3]; t == frameHeaders || t == frameData {
			c.earned.Store(true)
		}
	}
}

// calmDown closes the connection of a client over its budget for what,
// with a GOAWAY first when the server is between two frames; a writer
// blocked on a client that does not read is not waited for.
func (c *meteredConn) calmDown(what string) {
	if c.calm.Swap(true) {
		return
	}
	if c.wmu.TryLock() {
		if c.wn == 0 && c.wskip == 0 {
			msg := "too many " + what
			f := make([]byte, frameHeaderLen+8+len(msg))
			f[2] = byte(8 + len(msg))
			f[3] = frameGoAway
			binary.BigEndian.PutUint32(f[9:], c.last)
			binary.BigEndian.PutUint32(f[13:], errEnhanceYourCalm)
			copy(f[17:], msg)
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Conn.Write(f)
		}
		c.wmu.Unlock()
	}
	_ = c.Close()
	c.m.calmed.Add(1)
	c.m.holds.strike(peerOf(c.Conn), time.Now())
	c.m.log.LogAttrs(context.Background(), slog.LevelWarn, "HTTP/2 connection closed: the client went over a frame budget (ENHANCE_YOUR_CALM)",
		slog.String("over", what), slog.String("peer", c.RemoteAddr().String()))
}

// TLSListener serves TLS on l with cfg and meters each connection above
// TLS, where the frames are in the clear: for an HTTP server that serves
// the listener as it is (http.Server.Serve, not ServeTLS). cfg's
// NextProtos are set to h2 and http/1.1; HTTP/2 then arrives on the
// server as with prior knowledge, so it must speak unencrypted HTTP/2
// (http.Protocols.SetUnencryptedHTTP2), and its handlers find the TLS
// state in r.TLS through TLSState.
func (m *Meter) TLSListener(l net.Listener, cfg *tls.Config) net.Listener {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return meteredTLSListener{Listener: l, m: m, cfg: cfg}
}

type meteredTLSListener struct {
	net.Listener
	m   *Meter
	cfg *tls.Config
}

func (l meteredTLSListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := tls.Server(c, l.cfg)
	return &meteredTLSConn{meteredConn: l.m.Conn(tc).(*meteredConn), tls: tc}, nil
}

// meteredTLSConn is a metered TLS connection. It has no
// ConnectionState method on purpose: net/http would read it before the
// handshake, and take the connection for HTTP/1 only; without it, HTTP/2
// is served as with prior knowledge, and TLSState gives the requests
// their TLS state.
type meteredTLSConn struct {
	*meteredConn
	tls *tls.Conn
}

type connKey struct{}

// ConnContext keeps each connection in its requests' context, for
// TLSState (http.Server.ConnContext).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*meteredTLSConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// TLSState gives the requests next serves their TLS state in r.TLS when
// the server did not (HTTP/1.1 over TLSListener's connections).
func TLSState(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			if tc, ok := r.Context().Value(connKey{}).(*meteredTLSConn); ok {
				st := tc.tls.ConnectionState() // the request was read: the handshake is over
				r.TLS = &st
			}
		}
		next.ServeHTTP(w, r)
	})
}
