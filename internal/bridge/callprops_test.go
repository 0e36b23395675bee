package bridge_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// TestRequestWordsInOneProperty: a request carries its id and toolgate's
// words packed in wire.PropCall, nothing else — every further property
// costs the Pulsar client allocations on each publish — and the words
// say where to answer, the first credit and the deadline.
func TestRequestWordsInOneProperty(t *testing.T) {
	br := transport.NewMem()
	t.Cleanup(br.Close)
	replyTopic := wire.ReplyTopic("props-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	b := bridge.New(br, bridge.Options{ReplyTopic: replyTopic})
	t.Cleanup(b.Close)
	target := bridge.Target{RequestTopic: wire.RequestTopic("props"), ResponseTopic: wire.ResponseTopic("props")}
	got := make(chan map[string]string, 1)
	sub, err := br.Subscribe(t.Context(), target.RequestTopic, "svc", transport.Shared, func(m transport.Message) {
		got <- m.Properties
		_ = br.Publish(context.Background(), wire.ExpandCall(m.Properties)[wire.PropReplyTo], transport.Message{
			Payload:    wire.EncodeResponse(wire.Response{Response: "ok", EndOfStream: true}),
			Properties: map[string]string{wire.PropID: m.Properties[wire.PropID], wire.PropSeq: "0"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := b.Call(ctx, target, wire.Request{}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if out, err := c.Wait(ctx); err != nil || out != "ok" {
		t.Fatalf("got %q, %v", out, err)
	}
	props := <-got
	if len(props) != 2 || props[wire.PropID] == "" || props[wire.PropCall] == "" {
		t.Fatalf("request properties %v: want %s and %s only", props, wire.PropID, wire.PropCall)
	}
	words := wire.ExpandCall(props)
	if words[wire.PropReplyTo] != replyTopic {
		t.Errorf("reply-to %q, want %q (%s: %q)", words[wire.PropReplyTo], replyTopic, wire.PropCall, props[wire.PropCall])
	}
	if n, err := strconv.Atoi(words[wire.PropCredit]); err != nil || n < 1 {
		t.Errorf("credit %q: want a first window", words[wire.PropCredit])
	}
	dl, ok := wire.ParseDeadline(words[wire.PropDeadline])
	if want, _ := ctx.Deadline(); !ok || dl.Sub(want).Abs() > time.Second {
		t.Errorf("deadline %q, want about %v", words[wire.PropDeadline], want)
	}
	if words[wire.PropReceipt] != "" {
		t.Errorf("a receipt asked of a service never seen naming its instance: %q", props[wire.PropCall])
	}
}

// TestRequestCarriesCallerAssertion: a call given a caller assertion
// carries it in wire.PropCall, for the id it was signed for.
func TestRequestCarriesCallerAssertion(t *testing.T) {
	br := transport.NewMem()
	t.Cleanup(br.Close)
	b := bridge.New(br, bridge.Options{})
	t.Cleanup(b.Close)
	target := bridge.Target{RequestTopic: wire.RequestTopic("props-caller"), ResponseTopic: wire.ResponseTopic("props-caller")}
	got := make(chan map[string]string, 1)
	sub, err := br.Subscribe(t.Context(), target.RequestTopic, "svc", transport.Shared, func(m transport.Message) {
		got <- m.Properties
		_ = br.Publish(context.Background(), target.ResponseTopic, transport.Message{
			Payload:    wire.EncodeResponse(wire.Response{Response: "ok", EndOfStream: true}),
			Properties: map[string]string{wire.PropID: m.Properties[wire.PropID], wire.PropSeq: "0"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	const assertion = "eyJhbGciOiJFZERTQSJ9.eyJqdGkiOiJjYWxsLTEifQ.c2lnbmF0dXJl" // longer ones need no other handling
	c, err := b.Call(ctx, target, wire.Request{}, bridge.CallOptions{ID: "call-1", Caller: assertion + assertion + assertion + assertion})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if out, err := c.Wait(ctx); err != nil || out != "ok" {
		t.Fatalf("got %q, %v", out, err)
	}
	props := wire.ExpandCall(<-got)
	if props[wire.PropID] != "call-1" || props[wire.PropCaller] != assertion+assertion+assertion+assertion {
		t.Fatalf("request properties %v: want id call-1 and the assertion", props)
	}
}
