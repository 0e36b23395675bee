package bridge_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// reply is one message a scripted service sends: on which topic ("" = the
// call's response topic), with which number ("-" = none), saying what.
type reply struct {
	topic string
	seq   string
	text  string
	last  bool
}

// TestReplyGuardRails: the bus is a trust boundary. Replies from a topic
// where the call's replies are not expected, replays of a number already
// had, and unnumbered messages from a service that numbers its replies
// are refused and counted; the call takes the real reply, whole, and no
// false REPLY_LOST follows.
func TestReplyGuardRails(t *testing.T) {
	for _, bk := range brokers(t) {
		t.Run(bk.name, func(t *testing.T) {
			br := bk.new(t)
			f := start(t, br, nil)
			// Another service's response topic, which this gateway also
			// reads (it calls that service too).
			other := wire.ResponseTopic(brokertest.UniqueTopic("other"))
			if err := f.b.Listen(t.Context(), other); err != nil {
				t.Fatal(err)
			}
			cases := []struct {
				name    string
				script  []reply
				want    string
				refused int64
			}{
				{"forged reply on another service's topic", []reply{
					{topic: other, seq: "0", text: "FORGED|", last: false},
					{seq: "0", text: "REAL", last: true},
				}, "REAL", 1},
				{"replayed chunk", []reply{
					{seq: "0", text: "a"},
					{seq: "0", text: "a-again"},
					{seq: "1", text: "b", last: true},
				}, "ab", 1},
				{"unnumbered chunk from a numbering service", []reply{
					{seq: "0", text: "a"},
					{seq: "-", text: "SPLICED"},
					{seq: "1", text: "b", last: true},
				}, "ab", 1},
				{"a number that is not one", []reply{
					{seq: "0", text: "a"},
					{seq: "x", text: "BAD"},
					{seq: "1", text: "b", last: true},
				}, "ab", 1},
			}
			var mu sync.Mutex
			var script []reply
			sub, err := br.Subscribe(t.Context(), f.target.RequestTopic, "scripted", transport.Shared, func(m transport.Message) {
				mu.Lock()
				s := script
				mu.Unlock()
				for _, r := range s {
					topic := r.topic
					if topic == "" {
						topic = f.target.ResponseTopic
					}
					before := f.b.Stats().RefusedReplies
					props := map[string]string{wire.PropID: m.Properties[wire.PropID]}
					if r.seq != "-" {
						props[wire.PropSeq] = r.seq
					}
					_ = br.Publish(context.Background(), topic, transport.Message{
						Payload: wire.EncodeResponse(wire.Response{Response: r.text, EndOfStream: r.last}), Properties: props})
					if topic != f.target.ResponseTopic {
						// Topics are not ordered with each other: let the
						// forgery arrive before the real reply.
						eventually.Holds(5*time.Second, func() bool { return f.b.Stats().RefusedReplies != before })
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			waitSubscribed(t, br, f.target.RequestTopic, nil)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					mu.Lock()
					script = tc.script
					mu.Unlock()
					before := f.b.Stats().RefusedReplies
					c, err := f.b.Call(t.Context(), f.target, wire.Request{}, bridge.CallOptions{})
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					got, err := c.Wait(ctxTimeout(t, 10*time.Second))
					if err != nil || got != tc.want {
						t.Fatalf("got %q, %v; want %q", got, err, tc.want)
					}
					waitFor(t, 5*time.Second, func() bool { return f.b.Stats().RefusedReplies-before >= tc.refused })
					if n := f.b.Stats().RefusedReplies - before; n != tc.refused {
						t.Fatalf("%d replies refused, want %d", n, tc.refused)
					}
				})
			}
		})
	}
}

// A service known to answer on this instance's reply topic has its
// replies taken there only: the same id on its response topic is refused.
func TestReplyToServiceAnswersOnlyThere(t *testing.T) {
	br := transport.NewMem()
	t.Cleanup(br.Close)
	replyTopic := wire.ReplyTopic("guard-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	b := bridge.New(br, bridge.Options{ReplyTopic: replyTopic})
	t.Cleanup(b.Close)
	target := bridge.Target{RequestTopic: wire.RequestTopic("guard"), ResponseTopic: wire.ResponseTopic("guard")}
	if err := b.ListenAll(t.Context(), func() []string { return []string{target.ResponseTopic} }); err != nil {
		t.Fatal(err)
	}
	var forge atomic.Bool
	sub, err := br.Subscribe(t.Context(), target.RequestTopic, "svc", transport.Shared, func(m transport.Message) {
		id := m.Properties[wire.PropID]
		if forge.Load() {
			before := b.Stats().RefusedReplies
			_ = br.Publish(context.Background(), target.ResponseTopic, transport.Message{
				Payload: wire.EncodeResponse(wire.Response{Response: "FORGED", EndOfStream: true}), Properties: map[string]string{wire.PropID: id, wire.PropSeq: "0"}})
			// Topics are not ordered with each other: let the forgery
			// arrive before the real reply.
			eventually.Holds(5*time.Second, func() bool { return b.Stats().RefusedReplies != before })
		}
		_ = br.Publish(context.Background(), wire.ExpandCall(m.Properties)[wire.PropReplyTo], transport.Message{
			Payload: wire.EncodeResponse(wire.Response{Response: "REAL", EndOfStream: true}), Properties: map[string]string{wire.PropID: id, wire.PropSeq: "0"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// The first call teaches the bridge that the service answers on the
	// reply topic.
	c, err := b.Call(t.Context(), target, wire.Request{}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctxTimeout(t, 5*time.Second)); err != nil || got != "REAL" {
		t.Fatalf("first call: %q, %v", got, err)
	}
	c.Close()
	forge.Store(true)
	before := b.Stats().RefusedReplies
	c, err = b.Call(t.Context(), target, wire.Request{}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Wait(ctxTimeout(t, 5*time.Second)); err != nil || got != "REAL" {
		t.Fatalf("got %q, %v; want the reply from the reply topic", got, err)
	}
	if n := b.Stats().RefusedReplies - before; n != 1 {
		t.Fatalf("%d refused, want the forged one", n)
	}
}

// TestMixedReplicasBindPerCall: one service, replicas of both kinds on
// its request topic — one answers on the reply topic, numbered (the Go
// SDK), one on the response topic, unnumbered (TrustGraph's Python
// services). Every call takes its first reply's kind, wherever the
// service was seen answering before; a reply of the other kind for a
// call already answered is refused.
func TestMixedReplicasBindPerCall(t *testing.T) {
	br := transport.NewMem()
	t.Cleanup(br.Close)
	replyTopic := wire.ReplyTopic("mixed-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	b := bridge.New(br, bridge.Options{ReplyTopic: replyTopic})
	t.Cleanup(b.Close)
	target := bridge.Target{RequestTopic: wire.RequestTopic("mixed"), ResponseTopic: wire.ResponseTopic("mixed")}
	if err := b.ListenAll(t.Context(), func() []string { return []string{target.ResponseTopic} }); err != nil {
		t.Fatal(err)
	}
	msg := func(id, text string, last bool, seq string) transport.Message {
		m := transport.Message{Payload: wire.EncodeResponse(wire.Response{Response: text, EndOfStream: last}),
			Properties: map[string]string{wire.PropID: id}}
		if seq != "" {
			m.Properties[wire.PropSeq] = seq
		}
		return m
	}
	var n atomic.Int64
	var spoil atomic.Bool
	step := make(chan struct{})
	sub, err := br.Subscribe(t.Context(), target.RequestTopic, "svc", transport.Shared, func(m transport.Message) {
		id, rt := m.Properties[wire.PropID], wire.ExpandCall(m.Properties)[wire.PropReplyTo]
		switch {
		case spoil.Load():
			// A chunk on the response topic binds the call; then a
			// numbered reply on the reply topic, refused; then the end.
			_ = br.Publish(context.Background(), target.ResponseTopic, msg(id, "a", false, ""))
			<-step
			_ = br.Publish(context.Background(), rt, msg(id, "X", true, "0"))
			<-step
			_ = br.Publish(context.Background(), target.ResponseTopic, msg(id, "b", true, ""))
		case n.Add(1)%2 == 1:
			_ = br.Publish(context.Background(), rt, msg(id, "GO", true, "0"))
		default:
			_ = br.Publish(context.Background(), target.ResponseTopic, msg(id, "PY", true, ""))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := map[string]int{}
	for range 6 {
		c, err := b.Call(t.Context(), target, wire.Request{}, bridge.CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.Wait(ctxTimeout(t, 5*time.Second))
		c.Close()
		if err != nil {
			t.Fatalf("call %d: %v", len(got), err)
		}
		got[out]++
	}
	if got["GO"] != 3 || got["PY"] != 3 || b.Stats().RefusedReplies != 0 {
		t.Fatalf("answers %v, %d refused; want 3 of each kind, none refused", got, b.Stats().RefusedReplies)
	}
	spoil.Store(true)
	c, err := b.Call(t.Context(), target, wire.Request{}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxTimeout(t, 5*time.Second)
	if ch, err := c.Recv(ctx); err != nil || ch.Text != "a" {
		t.Fatalf("first chunk %q, %v", ch.Text, err)
	}
	step <- struct{}{}
	waitFor(t, 5*time.Second, func() bool { return b.Stats().RefusedReplies == 1 })
	step <- struct{}{}
	if ch, err := c.Recv(ctx); err != nil || ch.Text != "b" || !ch.Last {
		t.Fatalf("last chunk %+v, %v; want the response topic's", ch, err)
	}
}
