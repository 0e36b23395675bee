package toolservice

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
)

// A request asking for a receipt (wire.PropReceipt) that is not answered
// within wire.ReceiptAfter gets one, naming the instance; the same request
// published again while the call runs gets a receipt at once, and after
// it ended the reply again; the handler runs once. Replies name the
// instance.
func TestReceiptsAndRepeatedRequests(t *testing.T) {
	const replyTo = "non-persistent://tg/response/caller-r"
	release := make(chan struct{})
	var runs atomic.Int64
	svc, mem, got := runWithReplies(t, Config{ID: "svc", Topic: "receipts"},
		func(ctx context.Context, r *Request) (any, error) {
			runs.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return "answer " + r.ID, nil
		}, replyTo)
	next := func(what string) transport.Message {
		t.Helper()
		select {
		case m := <-got:
			return m
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s", what)
		}
		return transport.Message{}
	}
	request := func() {
		if err := mem.Publish(t.Context(), wire.RequestTopic("receipts"), transport.Message{Payload: wire.EncodeRequest(wire.Request{}),
			Properties: map[string]string{wire.PropID: "c1", wire.PropReplyTo: replyTo, wire.PropReceipt: "1"}}); err != nil {
			t.Fatal(err)
		}
	}
	isReceipt := func(m transport.Message) bool {
		return m.Properties[wire.PropReceipt] == "1" && m.Properties[wire.PropID] == "c1" &&
			m.Properties[wire.PropInstance] == svc.Instance() && len(m.Payload) == 0
	}
	request()
	if m := next("receipt"); !isReceipt(m) {
		t.Fatalf("first message %q %v, want a receipt", m.Payload, m.Properties)
	}
	request() // published again while it runs
	if m := next("receipt for the repeated request"); !isReceipt(m) {
		t.Fatalf("answer to the repeated request %q %v, want a receipt", m.Payload, m.Properties)
	}
	close(release)
	reply := next("reply")
	if reply.Properties[wire.PropReceipt] != "" || reply.Properties[wire.PropInstance] != svc.Instance() {
		t.Fatalf("reply %q %v, want one naming the instance", reply.Payload, reply.Properties)
	}
	// Once the call has ended here, the request again gets its reply
	// again.
	eventually.True(t, 5*time.Second, "the call forgotten as running", func() bool {
		_, running := svc.receipts.Load("c1")
		return !running
	})
	request()
	again := next("reply sent again")
	if string(again.Payload) != string(reply.Payload) {
		t.Fatalf("sent again %q, want %q", again.Payload, reply.Payload)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want once", n)
	}
	if n := svc.Stats().Repeated; n != 2 {
		t.Fatalf("%d repeated requests counted, want 2", n)
	}
}

// TestQueuedCallsSpokenFor: with every slot busy, requests waiting for a
// slot get their receipts too, within wire.ReceiptAfter of arriving — a
// caller does not take a queue for a frozen instance — and then run in
// order, each once.
func TestQueuedCallsSpokenFor(t *testing.T) {
	const replyTo = "non-persistent://tg/response/caller-q"
	release := make(chan struct{})
	var order []string
	_, mem, got := runWithReplies(t, Config{ID: "svc", Topic: "queued", MaxConcurrency: 1},
		func(ctx context.Context, r *Request) (any, error) {
			order = append(order, r.ID) // one slot: one handler at a time
			select {
			case <-release:
			case <-ctx.Done():
			}
			return "answer " + r.ID, nil
		}, replyTo)
	ids := []string{"q1", "q2", "q3"}
	for _, id := range ids {
		if err := mem.Publish(t.Context(), wire.RequestTopic("queued"), transport.Message{Payload: wire.EncodeRequest(wire.Request{}),
			Properties: map[string]string{wire.PropID: id, wire.PropReplyTo: replyTo, wire.PropReceipt: "1"}}); err != nil {
			t.Fatal(err)
		}
	}
	receipted := map[string]bool{}
	for len(receipted) < len(ids) {
		select {
		case m := <-got:
			if m.Properties[wire.PropReceipt] != "1" {
				t.Fatalf("%s answered before its release: %q", m.Properties[wire.PropID], m.Payload)
			}
			receipted[m.Properties[wire.PropID]] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("receipts for %v only, with one call running and two waiting; want all three", receipted)
		}
	}
	close(release)
	for range ids {
		select {
		case m := <-got:
			if m.Properties[wire.PropReceipt] != "" {
				t.Fatalf("a second receipt for %s", m.Properties[wire.PropID])
			}
		case <-time.After(5 * time.Second):
			t.Fatal("not every call answered after the release")
		}
	}
	if len(order) != 3 || order[0] != "q1" || order[1] != "q2" || order[2] != "q3" {
		t.Fatalf("ran %v, want q1 q2 q3, each once", order)
	}
}

// runWithReplies runs a service of cfg and h on an in-memory broker until
// the test ends, and gathers what it sends to replyTo.
func runWithReplies(t *testing.T, cfg Config, h Handler, replyTo string) (*Service, *transport.Mem, <-chan transport.Message) {
	t.Helper()
	mem := transport.NewMem()
	t.Cleanup(func() { mem.Close() })
	got := make(chan transport.Message, 20)
	sub, err := mem.Subscribe(t.Context(), replyTo, "caller", transport.Exclusive, func(m transport.Message) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	cfg.Logger = slog.New(slog.DiscardHandler)
	svc, err := New(cfg, h, WithPulsarClient(transporttest.PulsarClient(mem)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-svc.Ready()
	return svc, mem, got
}
