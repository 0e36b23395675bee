package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
)

// ctxEnds records, per call (its "tag" argument), that its handler
// started, and when and why the handler's context ended.
type ctxEnds struct {
	mu      sync.Mutex
	started map[string]bool
	end     map[string]ctxEnd
	ch      chan string
}

type ctxEnd struct {
	at    time.Time
	cause error
}

func newCtxEnds() *ctxEnds {
	return &ctxEnds{started: map[string]bool{}, end: map[string]ctxEnd{}, ch: make(chan string, 100)}
}

// isStarted reports whether the handler of the call tagged tag runs.
func (e *ctxEnds) isStarted(tag string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started[tag]
}

// handler runs echo.Handle, after waiting first_ms (a stream whose first
// chunk is late), and notes when the call's context ends.
func (e *ctxEnds) handler(ctx context.Context, r *toolservice.Request) (any, error) {
	tag, _ := r.Arguments["tag"].(string)
	e.mu.Lock()
	e.started[tag] = true
	e.mu.Unlock()
	// Not context.AfterFunc with a deferred stop: a handler that returns
	// because ctx is done can stop the callback before the cancellation
	// reaches it. A context still live at return is one that ends later
	// by itself, which is not recorded.
	live := make(chan struct{})
	defer func() {
		if ctx.Err() == nil {
			close(live)
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			e.mu.Lock()
			e.end[tag] = ctxEnd{time.Now(), context.Cause(ctx)}
			e.mu.Unlock()
			e.ch <- tag
		case <-live:
		}
	}()
	if n, ok := r.Arguments["first_ms"].(interface{ Int64() (int64, error) }); ok {
		ms, _ := n.Int64()
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return echo.Handle(ctx, r)
}

// waitEnd waits for the context of the call tagged tag to end, at most d.
func (e *ctxEnds) waitEnd(t *testing.T, tag string, d time.Duration) ctxEnd {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		e.mu.Lock()
		got, ok := e.end[tag]
		e.mu.Unlock()
		if ok {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service's context of call %q did not end within %v", tag, d)
		}
		select {
		case <-e.ch:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestGivenUpCallsEndAtTheService: a call the caller gives up ends the
// handler's context at the tool service, whichever instance has it, with
// ErrCallerGone as the cause — a unary call and a stream before its first
// chunk (told on the service's cancel topic, which every instance reads),
// a stream after it (on its instance's flow topic) — long before it
// would end by itself (each would run 60 s; the latency is logged, not
// asserted: the cause tells a cancel from a natural end). Calls that end
// normally, or by their own deadline, send nothing.
func TestGivenUpCallsEndAtTheService(t *testing.T) {
	for _, bk := range brokers(t) {
		t.Run(bk.name, func(t *testing.T) {
			br := bk.new(t)
			topic := brokertest.UniqueTopic("cancel")
			ends := newCtxEnds()
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var svcs []*toolservice.Service
			for i := range 2 { // two instances: the cancel must find the one with the call
				svc, err := toolservice.New(toolservice.Config{ID: topic, Topic: topic, StopGrace: time.Second, Logger: testLogger(t)},
					ends.handler, toolservice.WithPulsarClient(transporttest.PulsarClient(br)))
				if err != nil {
					t.Fatal(err)
				}
				svcs = append(svcs, svc)
				failed := make(chan error, 1)
				wg.Add(1)
				go func() { defer wg.Done(); failed <- svc.Run(ctx) }()
				select {
				case <-svc.Ready():
				case err := <-failed:
					t.Fatalf("instance %d: %v", i, err)
				case <-time.After(20 * time.Second):
					t.Fatalf("instance %d not ready", i)
				}
			}
			b := bridge.New(br, bridge.Options{Logger: testLogger(t)})
			t.Cleanup(func() { b.Close(); stop(); wg.Wait() })
			target := bridge.Target{RequestTopic: wire.RequestTopic(topic), ResponseTopic: wire.ResponseTopic(topic)}
			cancelled := func() int64 {
				var n int64
				for _, s := range svcs {
					n += s.Stats().Cancelled
				}
				return n
			}

			// Calls that end normally, or by their deadline, tell nobody.
			c, err := b.Call(t.Context(), target, wire.Request{Arguments: `{"tag":"ok","msg":"hi"}`}, bridge.CallOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if out, err := c.Wait(ctxTimeout(t, 10*time.Second)); err != nil || out != "hi" {
				t.Fatalf("normal call: %q %v", out, err)
			}
			c.Close()
			dctx, dcancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			c, err = b.Call(dctx, target, wire.Request{Arguments: `{"tag":"deadline","mode":"sleep","ms":6000}`}, bridge.CallOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var we *wire.Error // the service's own "timeout" can come first
			if _, err := c.Wait(dctx); !errors.Is(err, context.DeadlineExceeded) && (!errors.As(err, &we) || we.Type != "timeout") {
				t.Fatalf("call past its deadline: %v", err)
			}
			c.Close()
			dcancel()
			if s := b.Stats(); s.Cancels != 0 {
				t.Fatalf("%d cancels sent for calls that ended normally or by their deadline", s.Cancels)
			}

			for _, tc := range []struct {
				name, args string
				chunk      bool // read the first chunk before giving up
			}{
				{"unary", `"mode":"sleep","ms":60000`, false},
				{"stream before its first chunk", `"mode":"stream","n":30,"gap_ms":200,"first_ms":60000`, false},
				{"stream", `"mode":"stream","n":300,"gap_ms":200`, true},
			} {
				for i := range 3 { // several calls, spread over both instances
					tag := fmt.Sprintf("%s %d", tc.name, i)
					cctx, ccancel := context.WithCancel(t.Context())
					c, err := b.Call(cctx, target, wire.Request{Arguments: `{"tag":"` + tag + `",` + tc.args + `}`}, bridge.CallOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if tc.chunk {
						if _, err := c.Recv(ctxTimeout(t, 5*time.Second)); err != nil {
							t.Fatalf("%s: first chunk: %v", tag, err)
						}
					} else {
						eventually.True(t, 10*time.Second, tag+": its handler running", func() bool { return ends.isStarted(tag) })
					}
					gaveUp := time.Now()
					ccancel()
					if _, err := c.Recv(cctx); !errors.Is(err, context.Canceled) {
						t.Fatalf("%s: Recv after giving up: %v", tag, err)
					}
					c.Close()
					got := ends.waitEnd(t, tag, 30*time.Second)
					if !errors.Is(got.cause, toolservice.ErrCallerGone) {
						t.Errorf("%s: the service's context ended with %v, want ErrCallerGone", tag, got.cause)
					}
					t.Logf("%s: the service's context ended %v after the caller gave up", tag, got.at.Sub(gaveUp).Round(time.Millisecond))
				}
			}
			if s := b.Stats(); s.Cancels != 6 {
				t.Errorf("%d cancels sent on the cancel topic, want 6 (unary and streams before their first chunk)", s.Cancels)
			}
			// A service counts a cancel just after it ends the context.
			eventually.True(t, 10*time.Second, "the services count 9 calls given up", func() bool { return cancelled() == 9 })
			if n := cancelled(); n != 9 {
				t.Errorf("the services counted %d calls given up, want 9", n)
			}
		})
	}
}
