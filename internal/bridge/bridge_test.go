package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pulsar-client-go v0.19: a closed producer's send-timeout goroutine
		// only notices the close when its timer (SendTimeout) next fires.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
	)
}

// broker is one implementation the contract runs on.
type broker struct {
	name string
	new  func(t *testing.T) transport.Broker
}

// brokers returns the in-memory broker, and the real Pulsar broker when the
// test run provides one (make test always does, and then it must be up).
func brokers(t *testing.T) []broker {
	bs := []broker{{"mem", func(t *testing.T) transport.Broker {
		m := transport.NewMem()
		m.QueueSize = 10000
		t.Cleanup(m.Close)
		return m
	}}}
	if brokertest.WantPulsar() {
		bs = append(bs, broker{"pulsar", func(t *testing.T) transport.Broker {
			brokertest.RequirePulsar(t)
			p, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL(), ReceiverQueueSize: 5000})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			return p
		}})
	}
	return bs
}

// fixture is a bridge plus a tool service on a fresh topic.
type fixture struct {
	b      *bridge.Bridge
	target bridge.Target
	broker transport.Broker
}

func start(t *testing.T, br transport.Broker, h toolservice.Handler) fixture {
	t.Helper()
	topic := brokertest.UniqueTopic("bridge")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if h != nil {
		svc, err := toolservice.New(toolservice.Config{ID: topic, Topic: topic, MaxConcurrency: 512, StopGrace: time.Second,
			Logger: testLogger(t)}, h, toolservice.WithPulsarClient(transporttest.PulsarClient(br)))
		if err != nil {
			t.Fatal(err)
		}
		ready := make(chan error, 1)
		wg.Add(1)
		go func() { defer wg.Done(); ready <- svc.Run(ctx) }()
		waitSubscribed(t, br, wire.RequestTopic(topic), ready)
	}
	b := bridge.New(br, bridge.Options{})
	t.Cleanup(func() {
		b.Close()
		cancel()
		wg.Wait()
	})
	f := fixture{b: b, broker: br, target: bridge.Target{RequestTopic: wire.RequestTopic(topic), ResponseTopic: wire.ResponseTopic(topic)}}
	if err := b.Listen(t.Context(), f.target.ResponseTopic); err != nil {
		t.Fatal(err)
	}
	return f
}

func call(t *testing.T, f fixture, ctx context.Context, args string) (*bridge.Call, error) {
	t.Helper()
	return f.b.Call(ctx, f.target, wire.Request{User: "alice", Config: `{"k":"v"}`, Arguments: args}, bridge.CallOptions{})
}

func TestContract(t *testing.T) {
	for _, bk := range brokers(t) {
		t.Run(bk.name, func(t *testing.T) {
			br := bk.new(t)
			var started atomic.Int64 // calls the service began
			f := start(t, br, func(ctx context.Context, r *toolservice.Request) (any, error) {
				started.Add(1)
				return echo.Handle(ctx, r)
			})

			t.Run("unary", func(t *testing.T) {
				c, err := call(t, f, t.Context(), `{"msg":"hello"}`)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				got, err := c.Wait(ctxTimeout(t, 10*time.Second))
				if err != nil || got != "hello" {
					t.Fatalf("got %q, %v; want hello", got, err)
				}
			})
			t.Run("user and config reach the service", func(t *testing.T) {
				for mode, want := range map[string]string{"user": "alice", "config": `{"k": "v"}`} {
					c, err := call(t, f, t.Context(), `{"mode":"`+mode+`"}`)
					if err != nil {
						t.Fatal(err)
					}
					got, err := c.Wait(ctxTimeout(t, 10*time.Second))
					c.Close()
					if err != nil || got != want {
						t.Fatalf("mode %s: got %q, %v; want %q", mode, got, err, want)
					}
				}
			})
			t.Run("stream of 1000 chunks in order", func(t *testing.T) {
				c, err := call(t, f, t.Context(), `{"mode":"stream","n":1000}`)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				ctx := ctxTimeout(t, 20*time.Second)
				for i := 0; ; i++ {
					ch, err := c.Recv(ctx)
					if errors.Is(err, io.EOF) {
						if i != 1000 {
							t.Fatalf("stream ended after %d chunks, want 1000", i)
						}
						break
					}
					if err != nil {
						t.Fatalf("chunk %d: %v", i, err)
					}
					want := fmt.Sprintf("%d,", i)
					if i == 999 {
						want = "999"
					}
					if ch.Text != want || ch.Last != (i == 999) {
						t.Fatalf("chunk %d = %+v, want %q (last=%v)", i, ch, want, i == 999)
					}
				}
			})
			t.Run("service error keeps its type", func(t *testing.T) {
				c, err := call(t, f, t.Context(), `{"mode":"fail","type":"not-found"}`)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_, err = c.Wait(ctxTimeout(t, 10*time.Second))
				var we *wire.Error
				if !errors.As(err, &we) || we.Type != "not-found" || we.Message != "failed as asked" {
					t.Fatalf("got %v, want wire error not-found", err)
				}
			})
			t.Run("2000 concurrent calls each get their own reply", func(t *testing.T) {
				const n = 2000
				var wg sync.WaitGroup
				errs := make(chan error, n)
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						want := fmt.Sprintf("call-%d", i)
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						c, err := call(t, f, ctx, `{"msg":"`+want+`"}`)
						if err != nil {
							errs <- err
							return
						}
						defer c.Close()
						got, err := c.Wait(ctx)
						if err != nil {
							errs <- fmt.Errorf("%s: %w", want, err)
						} else if got != want {
							errs <- fmt.Errorf("got %q, want %q", got, want)
						}
					}()
				}
				wg.Wait()
				close(errs)
				var all []string
				for err := range errs {
					all = append(all, err.Error())
				}
				if len(all) > 0 {
					t.Fatalf("%d of %d calls failed, e.g. %s", len(all), n, all[0])
				}
				if got := f.b.Stats().InFlight; got != 0 {
					t.Fatalf("%d calls still pending", got)
				}
			})
			t.Run("cancelled callers leave nothing pending", func(t *testing.T) {
				var calls []*bridge.Call
				ctx, cancel := context.WithCancel(t.Context())
				published, began := f.b.Stats().Published, started.Load()
				for range 50 {
					c, err := call(t, f, ctx, `{"mode":"sleep","ms":2000}`)
					if err != nil {
						t.Fatal(err)
					}
					calls = append(calls, c)
				}
				// Cancel once the broker has them all (a request cancelled
				// while still queued is not sent at all) and the service
				// began them: the cancels end running handlers.
				waitFor(t, 10*time.Second, func() bool { return f.b.Stats().Published-published >= 50 })
				waitFor(t, 10*time.Second, func() bool { return started.Load()-began >= 50 })
				replies, orphans := f.b.Stats().Replies, f.b.Stats().OrphanReplies
				cancel()
				for _, c := range calls {
					if _, err := c.Recv(ctx); !errors.Is(err, context.Canceled) {
						t.Fatalf("Recv after cancel: %v, want context.Canceled", err)
					}
				}
				if got := f.b.Stats().InFlight; got != 0 {
					t.Fatalf("%d calls pending after cancellation, want 0", got)
				}
				// The service answers each all the same ("cancelled"):
				// the reply is counted as an orphan, never as delivered,
				// even when the cancel brings it back before its call has
				// left the pending map.
				eventually.Succeeds(t, 20*time.Second, "the cancelled calls' replies counted as orphans", func() error {
					s := f.b.Stats()
					if s.Replies != replies {
						t.Fatalf("%d replies delivered after every call was cancelled, want 0", s.Replies-replies)
					}
					if n := s.OrphanReplies - orphans; n < 50 {
						return fmt.Errorf("%d orphan replies of 50", n)
					}
					return nil
				})
			})
			t.Run("deadline ends a call nobody answers", func(t *testing.T) {
				silent := bridge.Target{RequestTopic: wire.RequestTopic(brokertest.UniqueTopic("silent")), ResponseTopic: f.target.ResponseTopic}
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				defer cancel()
				c, err := f.b.Call(ctx, silent, wire.Request{}, bridge.CallOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := c.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("got %v, want deadline exceeded", err)
				}
			})
			t.Run("the call's own deadline ends it without a context deadline", func(t *testing.T) {
				silent := bridge.Target{RequestTopic: wire.RequestTopic(brokertest.UniqueTopic("silent")), ResponseTopic: f.target.ResponseTopic}
				inFlight := f.b.Stats().InFlight
				start := time.Now()
				c, err := f.b.Call(t.Context(), silent, wire.Request{}, bridge.CallOptions{Deadline: start.Add(300 * time.Millisecond)})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := c.Wait(t.Context()); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("got %v, want deadline exceeded", err)
				}
				if time.Now().Before(start.Add(300 * time.Millisecond)) {
					t.Fatal("the call ended before its deadline")
				}
				if got := f.b.Stats().InFlight; got != inFlight {
					t.Fatalf("%d calls in flight after the deadline, want %d", got, inFlight)
				}
				// A past deadline ends the call at once.
				c2, err := f.b.Call(t.Context(), silent, wire.Request{}, bridge.CallOptions{Deadline: time.Now().Add(-time.Second)})
				if err != nil {
					t.Fatal(err)
				}
				defer c2.Close()
				if _, err := c2.Recv(t.Context()); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("past deadline: got %v, want deadline exceeded", err)
				}
			})
		})
	}
}

func TestMalformedReplies(t *testing.T) {
	for _, bk := range brokers(t) {
		t.Run(bk.name, func(t *testing.T) {
			br := bk.new(t)
			f := start(t, br, nil)
			replies := map[string][]byte{
				"not json":      []byte("oops"),
				"json array":    []byte(`[1,2]`),
				"wrong type":    []byte(`{"response": 42, "end_of_stream": true}`),
				"bad error obj": []byte(`{"error": "boom", "end_of_stream": true}`),
			}
			var mu sync.Mutex
			var next []byte
			sub, err := br.Subscribe(t.Context(), f.target.RequestTopic, "raw-request", transport.Shared, func(m transport.Message) {
				mu.Lock()
				payload := next
				mu.Unlock()
				_ = br.Publish(context.Background(), f.target.ResponseTopic, transport.Message{Payload: payload, Properties: map[string]string{wire.PropID: m.Properties[wire.PropID]}})
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			waitSubscribed(t, br, f.target.RequestTopic, nil)
			for name, payload := range replies {
				t.Run(name, func(t *testing.T) {
					mu.Lock()
					next = payload
					mu.Unlock()
					c, err := f.b.Call(t.Context(), f.target, wire.Request{}, bridge.CallOptions{})
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					if _, err := c.Wait(ctxTimeout(t, 10*time.Second)); !errors.Is(err, bridge.ErrBadReply) {
						t.Fatalf("got %v, want ErrBadReply", err)
					}
				})
			}
		})
	}
}

// Without flow control (a service that does not honour it, such as
// TrustGraph's Python ones), a reader that falls behind ends its call.
func TestSlowReaderIsCutOff(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	f := start(t, m, echo.Handle)
	b := bridge.New(m, bridge.Options{MaxBufferedChunks: 10, StreamWindow: -1})
	defer b.Close()
	c, err := b.Call(t.Context(), f.target, wire.Request{Arguments: `{"mode":"stream","n":100}`}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The chunks pile up unread: more than the call may buffer.
	eventually.True(t, 5*time.Second, "more chunks than the buffer holds delivered", func() bool { return b.Stats().Replies > 10 })
	var gotErr error
	for range 20 {
		if _, gotErr = c.Recv(ctxTimeout(t, 5*time.Second)); gotErr != nil {
			break
		}
	}
	if !errors.Is(gotErr, bridge.ErrSlowReader) {
		t.Fatalf("got %v, want ErrSlowReader", gotErr)
	}
}

// With flow control, the same slow reader gets every chunk: the service
// waits for credit, and the call never holds more than its window.
func TestSlowReaderWithFlowControl(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	f := start(t, m, echo.Handle)
	b := bridge.New(m, bridge.Options{MaxBufferedChunks: 10})
	defer b.Close()
	c, err := b.Call(t.Context(), f.target, wire.Request{Arguments: `{"mode":"stream","n":100}`}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 100 {
		if i%25 == 0 {
			// The reader is slow: it reads nothing until the service has
			// sent what its credit allows (half a window ahead at least).
			eventually.True(t, 5*time.Second, "the service a half window ahead", func() bool { return b.Stats().Replies >= int64(min(i+5, 100)) })
		}
		ch, err := c.Recv(ctxTimeout(t, 5*time.Second))
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		want := fmt.Sprint(i)
		if i < 99 {
			want += ","
		}
		if ch.Text != want {
			t.Fatalf("chunk %d = %q, want %q", i, ch.Text, want)
		}
	}
	if _, err := c.Recv(t.Context()); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last chunk: %v, want EOF", err)
	}
	// The bridge counts a reply, and lets its stream go, once it has
	// handed it over: the stats catch up just after the caller saw EOF.
	eventually.True(t, 5*time.Second, "grants sent, every reply counted and no stream left", func() bool {
		s := b.Stats()
		return s.Grants > 0 && s.Streams == 0 && s.Replies == 100
	})
}

// Calls beyond a service's bound wait for a slot, in order, and fail fast
// with ErrServiceBusy when none frees up in time; the slots come back.
func TestServiceBusy(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	f := start(t, m, echo.Handle)
	b := bridge.New(m, bridge.Options{MaxInFlightPerService: 2, ServiceQueueWait: 200 * time.Millisecond})
	defer b.Close()
	slow := wire.Request{Arguments: `{"mode":"sleep","ms":1500,"msg":"slow"}`}
	var calls []*bridge.Call
	for range 2 {
		c, err := b.Call(t.Context(), f.target, slow, bridge.CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	start := time.Now()
	_, err := b.Call(t.Context(), f.target, slow, bridge.CallOptions{})
	if !errors.Is(err, bridge.ErrServiceBusy) || !errors.Is(err, bridge.ErrOverloaded) {
		t.Fatalf("third call: %v, want ErrServiceBusy", err)
	}
	if time.Now().Before(start.Add(200 * time.Millisecond)) {
		t.Fatal("third call failed before its queue wait was over, want it to wait for a slot first")
	}
	// A call that waits while a slot frees up gets it.
	first := make(chan struct{})
	go func() {
		defer close(first)
		if out, err := calls[0].Wait(t.Context()); err != nil || out != "slow" {
			t.Errorf("first call: %q %v", out, err)
		}
		calls[0].Close()
	}()
	c, err := b.Call(t.Context(), f.target, wire.Request{Arguments: `{"msg":"next"}`}, bridge.CallOptions{})
	if err == nil {
		// Waited up to 200 ms while the first call still had ~1 s to go.
		c.Close()
		t.Fatal("fourth call got a slot while both were taken")
	}
	<-first
	c, err = b.Call(t.Context(), f.target, wire.Request{Arguments: `{"msg":"next"}`}, bridge.CallOptions{})
	if err != nil {
		t.Fatalf("after the first call ended: %v", err)
	}
	if out, err := c.Wait(ctxTimeout(t, 5*time.Second)); err != nil || out != "next" {
		t.Fatalf("call in a freed slot: %q %v", out, err)
	}
	c.Close()
	calls[1].Close()
	if s := b.Stats(); s.Busy != 2 || s.InFlight != 0 {
		t.Fatalf("stats %+v: want 2 busy, none in flight", s)
	}
}

func TestOverload(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	f := start(t, m, echo.Handle)
	b := bridge.New(m, bridge.Options{MaxInFlight: 2})
	defer b.Close()
	var calls []*bridge.Call
	for range 2 {
		c, err := b.Call(t.Context(), f.target, wire.Request{Arguments: `{"mode":"sleep","ms":200}`}, bridge.CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	if _, err := b.Call(t.Context(), f.target, wire.Request{}, bridge.CallOptions{}); !errors.Is(err, bridge.ErrOverloaded) {
		t.Fatalf("third call: %v, want ErrOverloaded", err)
	}
	for _, c := range calls {
		c.Close()
	}
	c, err := b.Call(t.Context(), f.target, wire.Request{Arguments: `{"msg":"ok"}`}, bridge.CallOptions{})
	if err != nil {
		t.Fatalf("after the others closed: %v", err)
	}
	c.Close()
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	eventually.True(t, d, "the condition", cond)
}
