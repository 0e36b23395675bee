package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"sync"
)

// The endpoint is stateless: notifications/cancelled arrives as a POST of
// its own, which no SDK session connects to the call it names. inflight
// does: it holds the cancel function of every tools/call being served,
// keyed by who sent it (the authenticated user and the client's address)
// and its JSON-RPC id, and a cancellation from the same sender ends the
// call — its context is cancelled, the bridge abandons it, and the client
// gets no result. A cancellation that matches no call (finished, another
// replica's, never sent) or more than one (two clients behind one address
// and user with the same id) is ignored, as the protocol allows.

// inflight is the calls being served, by key.
type inflight struct {
	mu    sync.Mutex
	calls map[string][]*context.CancelFunc
}

// callKey is the key of request id from the sender of req.
func callKey(req *request, id json.RawMessage) (string, bool) {
	if bytes.ContainsAny(id, " \t\r\n") {
		var b bytes.Buffer
		if json.Compact(&b, id) != nil {
			return "", false
		}
		id = b.Bytes()
	}
	if len(id) == 0 || string(id) == "null" {
		return "", false
	}
	host, _, err := net.SplitHostPort(req.base.Peer)
	if err != nil {
		host = req.base.Peer
	}
	return req.base.Caller.Key() + "\x00" + host + "\x00" + string(id), true
}

// add registers cancel under key until the returned function is called.
func (f *inflight) add(key string, cancel context.CancelFunc) (remove func()) {
	p := &cancel
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string][]*context.CancelFunc{}
	}
	f.calls[key] = append(f.calls[key], p)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		list := f.calls[key]
		for i, q := range list {
			if q == p {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(f.calls, key)
		} else {
			f.calls[key] = list
		}
	}
}

// cancel ends the call registered under key if exactly one is, and
// reports whether it did.
func (f *inflight) cancel(key string) bool {
	f.mu.Lock()
	list := f.calls[key]
	var c context.CancelFunc
	if len(list) == 1 {
		c = *list[0]
	}
	f.mu.Unlock()
	if c == nil {
		return false
	}
	c()
	return true
}

// cancelled is a notifications/cancelled message.
type cancelled struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  struct {
		RequestID json.RawMessage `json:"requestId"`
		Reason    string          `json:"reason"`
	} `json:"params"`
}

// cancellation reads body as a notifications/cancelled message: ok is
// false for anything else.
func cancellation(body []byte) (m cancelled, ok bool) {
	if !bytes.Contains(body, []byte("notifications/cancelled")) {
		return m, false // the common case, without decoding
	}
	if json.Unmarshal(body, &m) != nil || m.JSONRPC != "2.0" || m.Method != "notifications/cancelled" || len(m.ID) != 0 {
		return m, false
	}
	return m, true
}
