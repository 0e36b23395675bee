package limits

import (
	"net"
	"sync"
	"time"
)

// Holding a peer sent away: a client whose connection the meter closed
// for going over a frame budget usually comes straight back on a new one
// (an attacker's loop), and each new connection costs the gateway its
// setup and another budget's worth of frames before it is closed again.
// The meter holds such a peer's next connections: they are accepted, but
// nothing is read from them (no TLS handshake, no preface) until the
// hold is over. The hold starts at CalmHold and doubles with each closing
// within BudgetWindow of the last, up to maxHoldSteps doublings; a
// quiet BudgetWindow forgives the peer. Connections open before the
// closing — another client behind the same address — are not touched;
// new ones from that address wait for the hold.

// DefaultCalmHold is the first hold of a peer sent away.
const DefaultCalmHold = 250 * time.Millisecond

const (
	// maxHoldSteps bounds the doublings: 250 ms at most 8×, 2 s.
	maxHoldSteps = 3
	// maxHeldPeers bounds the peers remembered; past it, peers whose hold
	// and window are over are forgotten first, and new ones not held.
	maxHeldPeers = 4096
)

type heldPeer struct {
	strikes int
	last    time.Time // the last closing
	until   time.Time // the hold's end
}

// holds are a meter's held peers.
type holds struct {
	base  time.Duration // <= 0: nobody is held
	mu    sync.Mutex
	peers map[string]*heldPeer
}

// peerOf is the address part of a connection's remote address.
func peerOf(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// strike holds peer after one of its connections was closed at now.
func (h *holds) strike(peer string, now time.Time) {
	if h.base <= 0 || peer == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.peers[peer]
	if p == nil {
		if len(h.peers) >= maxHeldPeers {
			h.forgetLocked(now)
			if len(h.peers) >= maxHeldPeers {
				return
			}
		}
		if h.peers == nil {
			h.peers = map[string]*heldPeer{}
		}
		p = &heldPeer{}
		h.peers[peer] = p
	}
	if now.Sub(p.last) > BudgetWindow {
		p.strikes = 0
	}
	d := h.base << min(p.strikes, maxHoldSteps)
	p.strikes++
	p.last = now
	if until := now.Add(d); until.After(p.until) {
		p.until = until
	}
}

// forgetLocked drops the peers whose hold and window are over.
func (h *holds) forgetLocked(now time.Time) {
	for k, p := range h.peers {
		if now.After(p.until) && now.Sub(p.last) > BudgetWindow {
			delete(h.peers, k)
		}
	}
}

// until is the end of peer's hold at now; zero when it is not held.
func (h *holds) until(peer string, now time.Time) time.Time {
	if h.base <= 0 || peer == "" {
		return time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.peers[peer]; p != nil && p.until.After(now) {
		return p.until
	}
	return time.Time{}
}

// hold is a held connection's wait: wait blocks until the hold is over
// or the connection is closed.
type hold struct {
	until time.Time
	once  sync.Once
	done  chan struct{}
}

func newHold(until time.Time) *hold { return &hold{until: until, done: make(chan struct{})} }

// wait waits out the hold, once; false when the connection was closed.
func (h *hold) wait() bool {
	d := time.Until(h.until)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.done:
		return false
	}
}

func (h *hold) close() { h.once.Do(func() { close(h.done) }) }
