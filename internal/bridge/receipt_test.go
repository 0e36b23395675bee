package bridge_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// TestRepublishAfterInstanceLeft: a call to a service that sends receipts
// (it names its instance on replies) asks for one; a request the service
// never got — dropped as by a stopping replica's closing consumer — is
// published once more, with the same id, once an instance of the service
// has left, and then answered; without an instance leaving it is not, and
// a call whose service sent a receipt is not either. (Without hedges:
// hedge_test.go has those.)
func TestRepublishAfterInstanceLeft(t *testing.T) {
	br := transport.NewMem()
	t.Cleanup(br.Close)
	name := "rcpt-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	b := bridge.New(br, bridge.Options{ReplyTopic: wire.ReplyTopic(name), RepublishAfter: 50 * time.Millisecond, HedgeAfter: -1, Logger: testLogger(t)})
	t.Cleanup(b.Close)
	target := bridge.Target{RequestTopic: wire.RequestTopic(name), ResponseTopic: wire.ResponseTopic(name)}
	if err := b.ListenAll(t.Context(), func() []string { return []string{target.ResponseTopic} }); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		seen     = map[string]int{}    // deliveries per call id
		asked    = map[string]bool{}   // the request asked for a receipt
		dropNext bool                  // drop the next new call's first delivery
		slow     = map[string]func(){} // calls answered only when released
		slowNext bool
	)
	sub, err := br.Subscribe(t.Context(), target.RequestTopic, "svc", transport.Shared, func(m transport.Message) {
		m.Properties = wire.ExpandCall(m.Properties)
		id, rt := m.Properties[wire.PropID], m.Properties[wire.PropReplyTo]
		answer := func(inst string) {
			_ = br.Publish(context.Background(), rt, transport.Message{Payload: wire.EncodeResponse(wire.Response{Response: "ok", EndOfStream: true}),
				Properties: map[string]string{wire.PropID: id, wire.PropSeq: "0", wire.PropInstance: inst}})
		}
		mu.Lock()
		seen[id]++
		n := seen[id]
		asked[id] = m.Properties[wire.PropReceipt] == "1"
		drop := dropNext && n == 1
		if drop {
			dropNext = false
		}
		hold := slowNext && n == 1
		if hold {
			slowNext = false
			slow[id] = func() { answer("i1") }
		}
		mu.Unlock()
		switch {
		case drop:
		case hold:
			_ = br.Publish(context.Background(), rt, transport.Message{
				Properties: map[string]string{wire.PropID: id, wire.PropReceipt: "1", wire.PropInstance: "i1"}})
		case n > 1:
			answer("i2") // another instance took it the second time
		default:
			answer("i1")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	call := func(timeout time.Duration) (*bridge.Call, error) {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		c, err := b.Call(ctx, target, wire.Request{}, bridge.CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.Wait(ctx)
		return c, err
	}
	// The first reply names its instance: later calls ask for receipts.
	if _, err := call(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Dropped, no instance left: the call is not published again and
	// runs to its end.
	mu.Lock()
	dropNext = true
	mu.Unlock()
	c, err := call(500 * time.Millisecond) // ten times RepublishAfter
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a dropped request with no instance gone: %v, want the deadline", err)
	}
	mu.Lock()
	if !asked[c.ID()] || seen[c.ID()] != 1 {
		t.Fatalf("request asked for a receipt: %v, delivered %d times; want asked, once", asked[c.ID()], seen[c.ID()])
	}
	mu.Unlock()
	if n := b.Stats().Republished; n != 0 {
		t.Fatalf("%d requests published again with no instance gone", n)
	}
	// Dropped, an instance left: published again, answered by another.
	mu.Lock()
	dropNext = true
	mu.Unlock()
	b.InstanceLeft(target.RequestTopic)
	if c, err = call(5 * time.Second); err != nil {
		t.Fatalf("a request dropped when an instance left: %v", err)
	}
	mu.Lock()
	if seen[c.ID()] != 2 {
		t.Fatalf("delivered %d times, want twice", seen[c.ID()])
	}
	mu.Unlock()
	if n := b.Stats().Republished; n != 1 {
		t.Fatalf("%d requests published again, want 1", n)
	}
	// A receipt came: not published again however long the call runs;
	// the held reply arrives after ten RepublishAfter.
	mu.Lock()
	slowNext = true
	mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	sc, err := b.Call(ctx, target, wire.Request{}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	waitFor(t, 5*time.Second, func() bool { return b.Stats().Receipts == 1 })
	release := time.AfterFunc(500*time.Millisecond, func() {
		mu.Lock()
		f := slow[sc.ID()]
		mu.Unlock()
		f()
	})
	defer release.Stop()
	if _, err := sc.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[sc.ID()] != 1 || b.Stats().Republished != 1 {
		t.Fatalf("a call with a receipt delivered %d times, %d republished in all; want once, 1", seen[sc.ID()], b.Stats().Republished)
	}
}

// TestSweepEndsWithClose: an instance's leaving starts the sweep of calls
// waiting for a word, and Close ends it before it returns, however long
// the sweep would otherwise last.
func TestSweepEndsWithClose(t *testing.T) {
	br := transport.NewMem()
	t.Cleanup(br.Close)
	b := bridge.New(br, bridge.Options{RepublishAfter: time.Hour, Logger: testLogger(t)})
	sweeps := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "bridge.(*Bridge).startSweep.func1(")
	}
	if n := sweeps(); n != 0 {
		t.Fatalf("%d sweeps before any instance left", n)
	}
	b.InstanceLeft("non-persistent://tg/request/gone")
	b.InstanceLeft("non-persistent://tg/request/gone") // one sweep for both
	if n := sweeps(); n != 1 {
		t.Fatalf("%d sweeps after an instance left, want 1", n)
	}
	b.Close()
	if n := sweeps(); n != 0 {
		t.Fatalf("%d sweeps after Close, want 0", n)
	}
	b.InstanceLeft("non-persistent://tg/request/gone") // none starts after Close
	if n := sweeps(); n != 0 {
		t.Fatalf("%d sweeps started after Close", n)
	}
}
