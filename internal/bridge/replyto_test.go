package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// counter subscribes to topic under a subscription of its own and counts
// the messages that arrive there.
func counter(t *testing.T, br transport.Broker, topic string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := br.Subscribe(t.Context(), topic, brokertest.UniqueTopic("spy"), transport.Exclusive, func(transport.Message) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return &n
}

// replyBridge is a gateway instance's bridge with a reply topic of its own.
func replyBridge(t *testing.T, br transport.Broker, name string) *bridge.Bridge {
	t.Helper()
	b := bridge.New(br, bridge.Options{ReplyTopic: wire.ReplyTopic(brokertest.UniqueTopic(name))})
	t.Cleanup(b.Close)
	return b
}

// legacyService answers like TrustGraph's Python services: on the
// service's response topic, whatever reply-to the request names.
func legacyService(t *testing.T, br transport.Broker) bridge.Target {
	t.Helper()
	topic := brokertest.UniqueTopic("legacy")
	target := bridge.Target{RequestTopic: wire.RequestTopic(topic), ResponseTopic: wire.ResponseTopic(topic)}
	var wg sync.WaitGroup
	sub, err := br.Subscribe(t.Context(), target.RequestTopic, topic+"-request", transport.Shared, func(m transport.Message) {
		req, err := wire.DecodeRequest(m.Payload)
		if err != nil {
			t.Errorf("legacy service: %v", err)
			return
		}
		out := wire.EncodeResponse(wire.Response{Response: "legacy:" + req.Arguments, EndOfStream: true})
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := br.Publish(ctx, target.ResponseTopic, transport.Message{Payload: out, Properties: map[string]string{wire.PropID: m.Properties[wire.PropID]}}); err != nil {
				t.Errorf("legacy service: publish: %v", err)
			}
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close(); wg.Wait() })
	waitSubscribed(t, br, target.RequestTopic, nil)
	return target
}

// callMany makes n concurrent unary echo calls through b and fails the
// test unless each gets its own reply.
func callMany(t *testing.T, b *bridge.Bridge, target bridge.Target, n int, prefix string, want func(msg string) string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Sprintf("%s-%d", prefix, i)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := b.Call(ctx, target, wire.Request{User: "alice", Arguments: `{"msg":"` + msg + `"}`}, bridge.CallOptions{})
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			got, err := c.Wait(ctx)
			switch {
			case err != nil:
				errs <- fmt.Errorf("%s: %w", msg, err)
			case got != want(msg):
				errs <- fmt.Errorf("got %q, want %q", got, want(msg))
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		t.Fatalf("%d of %d calls failed, e.g. %v", len(all), n, all[0])
	}
}

// TestReplyToContract: two gateway instances, each with its own reply
// topic, in front of a Go service (which honours reply-to) and a service
// that ignores it, as TrustGraph's Python services do.
func TestReplyToContract(t *testing.T) {
	for _, bk := range brokers(t) {
		t.Run(bk.name, func(t *testing.T) {
			br := bk.new(t)
			f := start(t, br, echo.Handle) // the Go SDK service
			shared := counter(t, br, f.target.ResponseTopic)
			a, b := replyBridge(t, br, "gw-a"), replyBridge(t, br, "gw-b")
			for _, x := range []*bridge.Bridge{a, b} {
				if err := x.Listen(t.Context(), f.target.ResponseTopic); err != nil {
					t.Fatal(err)
				}
			}
			echoed := func(msg string) string { return msg }

			t.Run("Go service answers each instance on its own topic only", func(t *testing.T) {
				var wg sync.WaitGroup
				for _, x := range []*bridge.Bridge{a, b} {
					wg.Add(1)
					go func() { defer wg.Done(); callMany(t, x, f.target, 300, x.ReplyTopic(), echoed) }()
				}
				wg.Wait()
				for name, x := range map[string]*bridge.Bridge{"a": a, "b": b} {
					// A reply is counted after its call is woken: the last
					// count may trail the last Wait.
					eventually.True(t, 5*time.Second, "instance "+name+" counting 300 replies", func() bool { return x.Stats().Replies >= 300 })
					s := x.Stats()
					if s.Replies != 300 || s.RepliesViaReplyTo != 300 || s.OrphanReplies != 0 {
						t.Errorf("instance %s: %d replies, %d via its reply topic, %d orphans; want 300, 300, 0", name, s.Replies, s.RepliesViaReplyTo, s.OrphanReplies)
					}
					if got := x.Honouring(); !slices.Equal(got, []string{f.target.ResponseTopic}) {
						t.Errorf("instance %s: services honouring reply-to %q, want [%s]", name, got, f.target.ResponseTopic)
					}
				}
				if n := shared.Load(); n != 0 {
					t.Errorf("%d replies were also published on the shared response topic, want 0", n)
				}
			})
			t.Run("a stream of 1000 chunks comes in order on the reply topic", func(t *testing.T) {
				before := a.Stats().RepliesViaReplyTo
				c, err := a.Call(t.Context(), f.target, wire.Request{Arguments: `{"mode":"stream","n":1000}`}, bridge.CallOptions{})
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
					if want := fmt.Sprintf("%d,", i); i < 999 && ch.Text != want {
						t.Fatalf("chunk %d = %q, want %q", i, ch.Text, want)
					}
				}
				if got := a.Stats().RepliesViaReplyTo - before; got != 1000 {
					t.Errorf("%d chunks came on the reply topic, want 1000", got)
				}
				if n := shared.Load(); n != 0 {
					t.Errorf("%d chunks on the shared response topic, want 0", n)
				}
			})
			t.Run("a service that ignores reply-to still answers every instance", func(t *testing.T) {
				legacy := legacyService(t, br)
				for _, x := range []*bridge.Bridge{a, b} {
					if err := x.Listen(t.Context(), legacy.ResponseTopic); err != nil {
						t.Fatal(err)
					}
				}
				orphansB := b.Stats().OrphanReplies
				viaA := a.Stats().RepliesViaReplyTo
				callMany(t, a, legacy, 100, "legacy", func(msg string) string { return `legacy:{"msg":"` + msg + `"}` })
				// The shared topic reaches both instances: b drops a's replies.
				waitFor(t, 10*time.Second, func() bool { return b.Stats().OrphanReplies-orphansB == 100 })
				if got := a.Stats().RepliesViaReplyTo - viaA; got != 0 {
					t.Errorf("%d replies of the legacy service came on the reply topic, want 0", got)
				}
				if slices.Contains(a.Honouring(), legacy.ResponseTopic) {
					t.Errorf("the legacy service is listed as honouring reply-to: %q", a.Honouring())
				}
			})
			t.Run("a reply-to outside the response namespace is ignored", func(t *testing.T) {
				forged := wire.RequestTopic(brokertest.UniqueTopic("forged")) // tg/request, not tg/response
				redirected := counter(t, br, forged)
				before := shared.Load()
				// A request sent by hand, with a reply-to in tg/request.
				payload := wire.EncodeRequest(wire.Request{Arguments: `{"msg":"forged"}`})
				props := map[string]string{wire.PropID: "forged-1", wire.PropReplyTo: forged}
				if err := br.Publish(t.Context(), f.target.RequestTopic, transport.Message{Payload: payload, Properties: props}); err != nil {
					t.Fatal(err)
				}
				// The service answers a request once: its one reply came
				// on the shared topic, so none went to the forged one.
				waitFor(t, 10*time.Second, func() bool { return shared.Load()-before == 1 })
				if n := redirected.Load(); n != 0 {
					t.Fatalf("%d replies went to the forged reply-to %s, want 0", n, forged)
				}
			})
		})
	}
}
