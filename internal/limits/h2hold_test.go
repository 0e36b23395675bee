package limits

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestHoldsDoubleAndForgive: a peer's hold starts at the base, doubles
// with each closing within BudgetWindow of the last up to 8×, and a quiet
// window forgives it; other peers are not held.
func TestHoldsDoubleAndForgive(t *testing.T) {
	h := &holds{base: 250 * time.Millisecond}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := t0
	for i, want := range []time.Duration{250, 500, 1000, 2000, 2000} {
		h.strike("10.0.0.1", at)
		if got := h.until("10.0.0.1", at).Sub(at); got != want*time.Millisecond {
			t.Fatalf("closing %d: held %v, want %v", i+1, got, want*time.Millisecond)
		}
		at = at.Add(time.Second)
	}
	if u := h.until("10.0.0.2", at); !u.IsZero() {
		t.Fatalf("another peer held until %v", u)
	}
	if u := h.until("10.0.0.1", at.Add(2*time.Second)); !u.IsZero() {
		t.Fatalf("held past the hold's end: until %v", u)
	}
	quiet := at.Add(BudgetWindow + time.Second)
	h.strike("10.0.0.1", quiet)
	if got := h.until("10.0.0.1", quiet).Sub(quiet); got != 250*time.Millisecond {
		t.Fatalf("after a quiet window: held %v, want the base again", got)
	}
	off := &holds{}
	off.strike("10.0.0.1", t0)
	if u := off.until("10.0.0.1", t0); !u.IsZero() {
		t.Fatalf("holds off, yet held until %v", u)
	}
}

// TestHoldsBounded: past maxHeldPeers new peers are not remembered,
// until the old ones' holds and windows are over.
func TestHoldsBounded(t *testing.T) {
	h := &holds{base: time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxHeldPeers {
		h.strike(fmt.Sprintf("p%d", i), t0)
	}
	h.strike("late", t0)
	if len(h.peers) != maxHeldPeers || !h.until("late", t0).IsZero() {
		t.Fatalf("%d peers remembered, the late one held: %v", len(h.peers), !h.until("late", t0).IsZero())
	}
	later := t0.Add(BudgetWindow + 2*time.Second)
	h.strike("late", later)
	if len(h.peers) != 1 || h.until("late", later).IsZero() {
		t.Fatalf("after the window: %d peers, the late one held %v", len(h.peers), !h.until("late", later).IsZero())
	}
}

// TestMeterHoldsThePeerSentAway: once a connection went over its budget,
// the next connection from its address is held (counted, and a read on
// it ends when it is closed during the hold); a connection from another
// address is not.
func TestMeterHoldsThePeerSentAway(t *testing.T) {
	m := NewMeter(HTTP2{MaxPings: 2, CalmHold: time.Hour}, nil, false)
	in := frames(t, func(fr *http2.Framer) {
		for range 3 {
			_ = fr.WritePing(false, [8]byte{})
		}
	})
	if err := drain(m.Conn(&pipeConn{in: bytes.NewReader(in)})); !errors.Is(err, ErrCalm) {
		t.Fatalf("the flood: %v, want ErrCalm", err)
	}
	other := &pipeConn{in: bytes.NewReader(in[:len(http2.ClientPreface)])}
	other.addr = &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 2}
	if err := drain(m.Conn(other)); err == nil || errors.Is(err, ErrCalm) || m.Held() != 0 {
		t.Fatalf("another address: %v, held %d; want its bytes read at once", err, m.Held())
	}
	c := m.Conn(&pipeConn{in: bytes.NewReader(in)})
	if m.Held() != 1 {
		t.Fatalf("held %d connections, want the one from the address sent away", m.Held())
	}
	read := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 10)); read <- err }()
	_ = c.Close()
	if err := <-read; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a held connection closed: read %v, want net.ErrClosed", err)
	}
}
