package limits

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// frames is a client's bytes: the preface, then the frames write writes.
func frames(t testing.TB, write func(fr *http2.Framer)) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	write(fr)
	return b.Bytes()
}

// pipeConn is a connection whose reads come from in and whose writes go
// to out; Close is noted.
type pipeConn struct {
	net.Conn // nil: the methods not used here
	in       *bytes.Reader
	out      bytes.Buffer
	chunk    int // bytes a Read returns at most
	closed   bool
	addr     net.Addr // nil: 127.0.0.1:1
}

func (p *pipeConn) Read(b []byte) (int, error) {
	if p.chunk > 0 && len(b) > p.chunk {
		b = b[:p.chunk]
	}
	return p.in.Read(b)
}
func (p *pipeConn) Write(b []byte) (int, error)      { return p.out.Write(b) }
func (p *pipeConn) Close() error                     { p.closed = true; return nil }
func (p *pipeConn) SetWriteDeadline(time.Time) error { return nil }
func (p *pipeConn) RemoteAddr() net.Addr {
	if p.addr != nil {
		return p.addr
	}
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
}

// drain reads c to its end, and returns the error that ended it.
func drain(c net.Conn) error {
	buf := make([]byte, 1000)
	for {
		if _, err := c.Read(buf); err != nil {
			return err
		}
	}
}

// goAway is the GOAWAY the meter wrote on p, if any.
func goAway(t *testing.T, p *pipeConn) *http2.GoAwayFrame {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(p.out.Bytes()))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return nil
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g
		}
	}
}

func TestMeterBudgets(t *testing.T) {
	hdr := []byte{0x82} // :method GET, enough for the meter
	cases := []struct {
		name  string
		lim   HTTP2
		write func(fr *http2.Framer)
		calm  bool
	}{
		{"resets within the budget", HTTP2{MaxResets: 10}, func(fr *http2.Framer) {
			for id := uint32(1); id < 20; id += 2 {
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr, EndHeaders: true})
				_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		}, false},
		{"rapid reset", HTTP2{MaxResets: 10}, func(fr *http2.Framer) {
			for id := uint32(1); id < 24; id += 2 {
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr, EndHeaders: true})
				_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		}, true},
		{"resets of streams never opened cost nothing", HTTP2{MaxResets: 10}, func(fr *http2.Framer) {
			for id := uint32(1); id < 100; id += 2 {
				_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		}, false},
		{"no bound", HTTP2{MaxResets: -1}, func(fr *http2.Framer) {
			for id := uint32(1); id < 1000; id += 2 {
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr, EndHeaders: true})
				_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		}, false},
		{"ping flood", HTTP2{MaxPings: 5}, func(fr *http2.Framer) {
			for range 6 {
				_ = fr.WritePing(false, [8]byte{})
			}
		}, true},
		{"ping acknowledgements are free", HTTP2{MaxPings: 5}, func(fr *http2.Framer) {
			for range 100 {
				_ = fr.WritePing(true, [8]byte{})
			}
		}, false},
		{"settings flood", HTTP2{MaxSettings: 3}, func(fr *http2.Framer) {
			for range 4 {
				_ = fr.WriteSettings()
			}
		}, true},
		{"settings acknowledgements are free", HTTP2{MaxSettings: 3}, func(fr *http2.Framer) {
			for range 100 {
				_ = fr.WriteSettingsAck()
			}
		}, false},
		{"large frames pass unread", HTTP2{MaxPings: 1}, func(fr *http2.Framer) {
			// DATA whose payload holds what would be PING frames.
			inner := frames(t, func(fr *http2.Framer) {
				for range 50 {
					_ = fr.WritePing(false, [8]byte{})
				}
			})
			_ = fr.WriteData(1, false, inner)
		}, false},
	}
	for _, c := range cases {
		for _, chunk := range []int{0, 1, 7} {
			t.Run(c.name, func(t *testing.T) {
				p := &pipeConn{in: bytes.NewReader(frames(t, c.write)), chunk: chunk}
				m := NewMeter(c.lim, nil, false)
				err := drain(m.Conn(p))
				if !c.calm {
					if !errors.Is(err, io.EOF) || p.closed || m.Calmed() != 0 {
						t.Fatalf("read chunks of %d: %v, closed %v; want everything read", chunk, err, p.closed)
					}
					return
				}
				if !errors.Is(err, ErrCalm) || !p.closed || m.Calmed() != 1 {
					t.Fatalf("read chunks of %d: %v, closed %v; want ErrCalm and the connection closed", chunk, err, p.closed)
				}
				if g := goAway(t, p); g == nil || g.ErrCode != http2.ErrCodeEnhanceYourCalm {
					t.Fatalf("GOAWAY %+v, want ENHANCE_YOUR_CALM", g)
				}
			})
		}
	}
}

// TestMeterPingsEarned: the pings a client sends while answers come are
// forgiven, as gRPC's flow control pings as data arrives.
func TestMeterPingsEarned(t *testing.T) {
	p := &pipeConn{in: bytes.NewReader(nil)}
	m := NewMeter(HTTP2{MaxPings: 2}, nil, false)
	c := m.Conn(p)
	answer := func() {
		var b bytes.Buffer
		_ = http2.NewFramer(&b, nil).WriteData(1, false, []byte("an answer"))
		if _, err := c.Write(b.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	ping := frames(t, func(fr *http2.Framer) { _ = fr.WritePing(false, [8]byte{}) })
	p.in = bytes.NewReader(ping)
	buf := make([]byte, 100)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	one := ping[len(http2.ClientPreface):]
	for i := range 10 {
		answer()
		p.in = bytes.NewReader(bytes.Repeat(one, 2))
		if _, err := c.Read(buf); err != nil {
			t.Fatalf("round %d: %v; pings after an answer are earned", i, err)
		}
	}
	p.in = bytes.NewReader(bytes.Repeat(one, 3))
	if _, err := c.Read(buf); !errors.Is(err, ErrCalm) {
		t.Fatalf("3 pings without an answer, budget 2: %v, want ErrCalm", err)
	}
}

// TestMeterOldResetsFree: a reset of a stream opened PrematureReset ago
// or more costs nothing.
func TestMeterOldResetsFree(t *testing.T) {
	mc := NewMeter(HTTP2{MaxResets: 1}, nil, false).Conn(&pipeConn{}).(*meteredConn)
	now := time.Now()
	for id := uint32(1); id < 41; id += 2 {
		mc.opened(id)
		mc.recent[(mc.rn-1)%recentStreams].at = now.Add(-2 * PrematureReset)
	}
	for id := uint32(1); id < 41; id += 2 {
		if mc.premature(id, now) {
			t.Fatalf("stream %d, opened 2 s ago, counted as a premature reset", id)
		}
	}
	mc.opened(41)
	if !mc.premature(41, time.Now()) {
		t.Fatal("a stream reset as it opened is a premature reset")
	}
}

// TestMeterNotHTTP2 passes HTTP/1.1 through unread.
func TestMeterNotHTTP2(t *testing.T) {
	req := "POST /v1/tools/echo:invoke HTTP/1.1\r\nHost: x\r\n\r\n" + string(bytes.Repeat([]byte{0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, 100))
	p := &pipeConn{in: bytes.NewReader([]byte(req)), chunk: 5}
	m := NewMeter(HTTP2{MaxPings: 1}, nil, false)
	c := m.Conn(p)
	got, err := io.ReadAll(c)
	if err != nil || string(got) != req || p.closed {
		t.Fatalf("read %d of %d bytes, %v, closed %v", len(got), len(req), err, p.closed)
	}
	if mc := c.(*meteredConn); mc.mode.Load() != modeOther {
		t.Fatalf("mode %d, want not HTTP/2", mc.mode.Load())
	}
}

// FuzzMeterScan: whatever a client sends, in whatever pieces, the meter
// reads the frame headers HTTP/2's own framer reads (the highest stream
// a HEADERS frame opened tells), and never panics.
func FuzzMeterScan(f *testing.F) {
	f.Add(frames(f, func(fr *http2.Framer) {
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}, EndHeaders: true})
		_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteData(3, true, []byte("data"))
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: []byte{0x82}, EndHeaders: true})
	})[len(http2.ClientPreface):], uint8(3))
	f.Add([]byte{0, 0, 0, 1, 4, 0, 0, 0, 9}, uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, chunk uint8) {
		in := append([]byte(http2.ClientPreface), body...)
		want := highestHeaders(body)
		mc := NewMeter(HTTP2{MaxResets: -1, MaxPings: -1, MaxSettings: -1}, nil, false).Conn(&pipeConn{}).(*meteredConn)
		step := int(chunk%16) + 1
		for i := 0; i < len(in); i += step {
			if what := mc.scan(in[i:min(len(in), i+step)]); what != "" {
				t.Fatalf("over a budget with no budgets: %s", what)
			}
		}
		if mc.last != want {
			t.Fatalf("the meter's highest stream opened: %d; HTTP/2's framer reads %d", mc.last, want)
		}
	})
}

// highestHeaders is the highest stream a HEADERS frame of b names,
// frames read one after the other by HTTP/2's framer.
func highestHeaders(b []byte) uint32 {
	var last uint32
	for len(b) >= frameHeaderLen {
		h, err := http2.ReadFrameHeader(bytes.NewReader(b))
		if err != nil {
			return last
		}
		if h.Type == http2.FrameHeaders {
			last = max(last, h.StreamID)
		}
		b = b[min(len(b), frameHeaderLen+int(h.Length)):]
	}
	return last
}
