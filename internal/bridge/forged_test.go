package bridge_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
)

// TestForgeriesLeaveTheAnswer: the bus is a trust boundary. A party that
// may publish on a service's response topic, and reads its requests, sends
// there for each call, before the service answers, a receipt naming an
// instance of its own, or a chunk the bridge refuses. Neither binds the
// call to anything: the genuine answer (the Go SDK's, on the same topic)
// is taken, whole, within the call's deadline.
func TestForgeriesLeaveTheAnswer(t *testing.T) {
	stream := `{"mode":"stream","n":50}` // more than a call's first credit: grants must reach the service
	var whole strings.Builder
	for i := range 49 {
		whole.WriteString(strconv.Itoa(i) + ",")
	}
	whole.WriteString("49")
	cases := []struct {
		name  string
		args  string
		want  string
		forge func(id string, target bridge.Target) transport.Message
	}{
		{"a receipt naming another instance", `{"msg":"genuine"}`, "genuine", forgedReceipt},
		{"a receipt naming another instance, before a stream", stream, whole.String(), forgedReceipt},
		{"a chunk with a number that is not one, from another instance", `{"msg":"genuine"}`, "genuine",
			func(id string, _ bridge.Target) transport.Message {
				return forgedChunk(map[string]string{wire.PropID: id, wire.PropSeq: "x", wire.PropInstance: "forger"})
			}},
		{"a chunk with a number that is not one, naming a flow topic of its own", stream, whole.String(),
			func(id string, target bridge.Target) transport.Message {
				return forgedChunk(map[string]string{wire.PropID: id, wire.PropSeq: "x",
					wire.PropFlow: wire.FlowTopic(target.RequestTopic, "forger")})
			}},
	}
	for _, bk := range brokers(t) {
		t.Run(bk.name, func(t *testing.T) {
			br := bk.new(t)
			var (
				b       atomic.Pointer[bridge.Bridge]
				seen    atomic.Int64 // receipts and refusals before the current call
				late    atomic.Bool  // the service answered before the bridge saw the forgery
				mu      sync.Mutex
				out     = map[string]chan struct{}{} // call id → closed once its forgery is out
				current func(id string, target bridge.Target) transport.Message
			)
			forgeryOut := func(id string) chan struct{} {
				mu.Lock()
				defer mu.Unlock()
				ch := out[id]
				if ch == nil {
					ch = make(chan struct{})
					out[id] = ch
				}
				return ch
			}
			words := func() int64 { s := b.Load().Stats(); return s.Receipts + s.RefusedReplies }
			f := start(t, br, func(ctx context.Context, r *toolservice.Request) (any, error) {
				// The genuine answer comes after the forgery: once the
				// broker took it (one topic: the bridge reads it first),
				// and the bridge has seen it.
				select {
				case <-forgeryOut(r.ID):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				if !eventually.Holds(5*time.Second, func() bool { return words() > seen.Load() }) {
					late.Store(true)
				}
				return echo.Handle(ctx, r)
			})
			b.Store(f.b)
			seen.Store(-1) // the first call has no forgery to wait for
			sub, err := br.Subscribe(t.Context(), f.target.RequestTopic, "forger", transport.Exclusive, func(m transport.Message) {
				id := m.Properties[wire.PropID]
				mu.Lock()
				forge := current
				mu.Unlock()
				if forge != nil {
					if err := br.Publish(context.Background(), f.target.ResponseTopic, forge(id, f.target)); err != nil {
						t.Errorf("publishing the forgery: %v", err)
					}
				}
				close(forgeryOut(id))
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			// The service names its instance on its replies: later calls
			// ask it for receipts.
			c, err := call(t, f, t.Context(), `{"msg":"first"}`)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := c.Wait(ctxTimeout(t, 10*time.Second)); err != nil || got != "first" {
				t.Fatalf("first call: %q, %v", got, err)
			}
			c.Close()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					mu.Lock()
					current = tc.forge
					mu.Unlock()
					seen.Store(words())
					c, err := call(t, f, t.Context(), tc.args)
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					got, err := c.Wait(ctxTimeout(t, 5*time.Second))
					if err != nil || got != tc.want {
						t.Fatalf("got %.40q, %v; want the genuine answer %.40q", got, err, tc.want)
					}
					if late.Swap(false) {
						t.Fatal("the service answered before the bridge had seen the forgery")
					}
				})
			}
		})
	}
}

// forgedReceipt is a receipt for call id naming an instance that does not
// have the call.
func forgedReceipt(id string, _ bridge.Target) transport.Message {
	return transport.Message{Properties: map[string]string{wire.PropID: id, wire.PropReceipt: "1", wire.PropInstance: "forger"}}
}

// forgedChunk is a chunk (not the last) with props.
func forgedChunk(props map[string]string) transport.Message {
	return transport.Message{Payload: wire.EncodeResponse(wire.Response{Response: "FORGED"}), Properties: props}
}

// TestOneInstanceAnswersACall: the chunks of one answer all come from the
// instance whose reply the call took first. Another instance's chunk for
// it is refused, and so is its receipt, which changes nothing; the call
// goes on with its own instance's.
func TestOneInstanceAnswersACall(t *testing.T) {
	br := transport.NewMem()
	t.Cleanup(br.Close)
	f := start(t, br, nil)
	send := func(id string, props map[string]string, r *wire.Response) {
		props[wire.PropID] = id
		m := transport.Message{Properties: props}
		if r != nil {
			m.Payload = wire.EncodeResponse(*r)
		}
		_ = br.Publish(context.Background(), f.target.ResponseTopic, m)
	}
	sub, err := br.Subscribe(t.Context(), f.target.RequestTopic, "svc", transport.Shared, func(m transport.Message) {
		id := m.Properties[wire.PropID]
		send(id, map[string]string{wire.PropSeq: "0", wire.PropInstance: "i1"}, &wire.Response{Response: "a"})
		send(id, map[string]string{wire.PropSeq: "1", wire.PropInstance: "i2"}, &wire.Response{Response: "X", EndOfStream: true})
		send(id, map[string]string{wire.PropReceipt: "1", wire.PropInstance: "i2"}, nil)
		send(id, map[string]string{wire.PropSeq: "1", wire.PropInstance: "i1"}, &wire.Response{Response: "b", EndOfStream: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	c, err := f.b.Call(t.Context(), f.target, wire.Request{}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Wait(ctxTimeout(t, 5*time.Second)); err != nil || got != "ab" {
		t.Fatalf("got %q, %v; want instance i1's answer, ab", got, err)
	}
	if s := f.b.Stats(); s.RefusedReplies != 2 || s.Receipts != 0 {
		t.Fatalf("%d refused, %d receipts taken; want instance i2's chunk and receipt refused", s.RefusedReplies, s.Receipts)
	}
}
