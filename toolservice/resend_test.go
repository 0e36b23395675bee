package toolservice

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
)

// The replies kept for a resend are bounded in number, bytes and age, and
// each is given out at most recentGive times.
func TestRecentReplies(t *testing.T) {
	var r recentReplies
	now := time.Now()
	msg := func(n int) transport.Message { return transport.Message{Payload: make([]byte, n)} }
	r.keep("a", "t", msg(10), now)
	for i := range recentGive {
		if rep, ok := r.take("a", now); !ok || rep.topic != "t" {
			t.Fatalf("take a, %d: %v %v", i+1, rep, ok)
		}
	}
	if _, ok := r.take("a", now); ok {
		t.Fatalf("a reply was given out more than %d times", recentGive)
	}
	// An id kept again is queued anew: it outlives older ones.
	r.keep("x", "t", msg(1), now)
	r.keep("y", "t", msg(1), now.Add(30*time.Second))
	r.keep("x", "t", msg(2), now.Add(40*time.Second))
	if _, ok := r.take("x", now.Add(recentTTL+10*time.Second)); !ok {
		t.Fatal("a reply kept again expired with its first keep")
	}
	if _, ok := r.take("y", now.Add(recentTTL+31*time.Second)); ok {
		t.Fatal("a reply outlived recentTTL behind one kept again")
	}
	r = recentReplies{}
	r.keep("big", "t", msg(recentMaxMessage+1), now)
	if _, ok := r.take("big", now); ok {
		t.Fatal("a reply over recentMaxMessage was kept")
	}
	for i := range recentMax + 100 {
		r.keep(fmt.Sprint(i), "t", msg(1), now)
	}
	if n := r.len(); n != recentMax {
		t.Fatalf("%d replies kept, want %d", n, recentMax)
	}
	if _, ok := r.take("0", now); ok {
		t.Fatal("the oldest reply is still kept past recentMax")
	}
	if _, ok := r.take(fmt.Sprint(recentMax+99), now); !ok {
		t.Fatal("the newest reply is not kept")
	}
	for i := range 40 {
		r.keep(fmt.Sprint("m", i), "t", msg(recentMaxMessage), now)
	}
	if r.bytes > recentMaxBytes {
		t.Fatalf("%d bytes kept, want at most %d", r.bytes, recentMaxBytes)
	}
	r.keep("late", "t", msg(1), now.Add(recentTTL+time.Second)) // expires everything before
	if n := r.len(); n != 1 {
		t.Fatalf("%d replies kept past recentTTL, want only the last", n)
	}
}

// A caller that missed a reply asks for it on the cancel topic
// (wire.CreditResend): the instance that answered publishes the same
// message again to the same topic, up to recentGive times; an unknown id
// is ignored.
func TestResendOnRequest(t *testing.T) {
	mem := transport.NewMem()
	defer mem.Close()
	const replyTo = "non-persistent://tg/response/caller-1"
	got := make(chan transport.Message, 10)
	sub, err := mem.Subscribe(t.Context(), replyTo, "caller", transport.Exclusive, func(m transport.Message) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	svc, err := New(Config{ID: "svc", Topic: "resend", Logger: slog.New(slog.DiscardHandler)},
		func(_ context.Context, r *Request) (any, error) { return "answer " + r.ID, nil }, WithPulsarClient(transporttest.PulsarClient(mem)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-svc.Ready()
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
	if err := mem.Publish(t.Context(), wire.RequestTopic("resend"), transport.Message{Payload: wire.EncodeRequest(wire.Request{}),
		Properties: map[string]string{wire.PropID: "c1", wire.PropReplyTo: replyTo}}); err != nil {
		t.Fatal(err)
	}
	first := next("reply")
	ask := func(id string) {
		if err := mem.Publish(t.Context(), wire.CancelTopic(wire.RequestTopic("resend")), transport.Message{Payload: []byte(wire.CreditResend),
			Properties: map[string]string{wire.PropID: id, wire.PropCredit: wire.CreditResend}}); err != nil {
			t.Fatal(err)
		}
	}
	ask("c1")
	again := next("reply sent again")
	if string(again.Payload) != string(first.Payload) || again.Properties[wire.PropID] != "c1" || again.Properties[wire.PropSeq] != first.Properties[wire.PropSeq] {
		t.Fatalf("sent again: %s %v; want the first reply %s %v", again.Payload, again.Properties, first.Payload, first.Properties)
	}
	if !strings.Contains(string(again.Payload), "answer c1") {
		t.Fatalf("reply %s", again.Payload)
	}
	for range recentGive - 1 { // a caller may ask again, its first request lost
		ask("c1")
		next("reply sent again once more")
	}
	ask("c1")    // given out recentGive times already
	ask("other") // never answered here
	select {
	case m := <-got:
		t.Fatalf("a reply sent a third time, or one for an unknown call: %s %v", m.Payload, m.Properties)
	case <-time.After(200 * time.Millisecond):
	}
	if n := svc.Stats().Resent; n != recentGive {
		t.Fatalf("Resent = %d, want %d", n, recentGive)
	}
}

// slowResend is a broker that holds a reply sent again (the second
// message with the same id to the reply topic) for a while before it
// passes it on, as a broker slow to take it would.
type slowResend struct {
	*transport.Mem
	topic  string
	seen   sync.Map
	passed atomic.Int64 // when the reply sent again was passed on (UnixNano)
}

func (b *slowResend) PublishAsync(ctx context.Context, topic string, msg transport.Message, done func(error)) error {
	if topic == b.topic {
		if _, again := b.seen.LoadOrStore(msg.Properties[wire.PropID], true); again {
			time.Sleep(200 * time.Millisecond) //nolint:forbidigo // a broker slow to take the reply sent again: Run must outwait it, and a gate would need Run's end to open
			b.passed.Store(time.Now().UnixNano())
		}
	}
	return b.Mem.PublishAsync(ctx, topic, msg, done)
}

// A reply asked for again just before the service stops is sent before Run
// returns: the resend is part of the service's work, not left running
// after its client closed. (The transport's close also waits for what was
// queued; Run's wait covers a resend that had not reached it yet.)
func TestResendFinishesBeforeStop(t *testing.T) {
	const replyTo = "non-persistent://tg/response/caller-stop"
	mem := transport.NewMem()
	defer mem.Close()
	got := make(chan transport.Message, 10)
	sub, err := mem.Subscribe(t.Context(), replyTo, "caller", transport.Exclusive, func(m transport.Message) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	broker := &slowResend{Mem: mem, topic: replyTo}
	svc, err := New(Config{ID: "svc", Topic: "resend-stop", Logger: slog.New(slog.DiscardHandler)},
		func(_ context.Context, r *Request) (any, error) { return "answer", nil }, WithPulsarClient(transporttest.PulsarClient(broker)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	<-svc.Ready()
	if err := mem.Publish(t.Context(), wire.RequestTopic("resend-stop"), transport.Message{Payload: wire.EncodeRequest(wire.Request{}),
		Properties: map[string]string{wire.PropID: "c1", wire.PropReplyTo: replyTo}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no reply")
	}
	if err := mem.Publish(t.Context(), wire.CancelTopic(wire.RequestTopic("resend-stop")), transport.Message{Payload: []byte(wire.CreditResend),
		Properties: map[string]string{wire.PropID: "c1", wire.PropCredit: wire.CreditResend}}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the ask reached the service", func() bool { return svc.Stats().Resent > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stopped := time.Now().UnixNano()
	if passed := broker.passed.Load(); passed == 0 || passed > stopped {
		t.Fatal("Run returned before the reply asked for again was sent")
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the reply asked for again never arrived")
	}
}
