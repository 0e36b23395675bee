package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// scripted is a tool service on the in-memory broker whose every request
// delivery is handed to the test's script, with the number of deliveries
// of that id so far (1: the first) and the request's arguments.
type scripted struct {
	br     *transport.Mem
	target bridge.Target
	mu     sync.Mutex
	seen   map[string]int
	script func(s *scripted, id, replyTo string, n int, args string)
	// cancels are the call ids given up on the cancel topic.
	cancels map[string]int
}

func newScripted(t *testing.T, br *transport.Mem, name string) *scripted {
	t.Helper()
	s := &scripted{br: br, seen: map[string]int{}, cancels: map[string]int{},
		target: bridge.Target{RequestTopic: wire.RequestTopic(name), ResponseTopic: wire.ResponseTopic(name)}}
	sub, err := br.Subscribe(t.Context(), s.target.RequestTopic, "svc", transport.Shared, func(m transport.Message) {
		m.Properties = wire.ExpandCall(m.Properties)
		id := m.Properties[wire.PropID]
		s.mu.Lock()
		s.seen[id]++
		n, script := s.seen[id], s.script
		s.mu.Unlock()
		req, _ := wire.DecodeRequest(m.Payload)
		if script != nil {
			script(s, id, m.Properties[wire.PropReplyTo], n, req.Arguments)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	csub, err := br.Subscribe(t.Context(), wire.CancelTopic(s.target.RequestTopic), "svc-cancel-x", transport.Exclusive, func(m transport.Message) {
		if m.Properties[wire.PropCredit] == wire.CreditCancel {
			s.mu.Lock()
			s.cancels[m.Properties[wire.PropID]]++
			s.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = csub.Close() })
	return s
}

func (s *scripted) setScript(f func(s *scripted, id, replyTo string, n int, args string)) {
	s.mu.Lock()
	s.script = f
	s.mu.Unlock()
}

func (s *scripted) deliveries(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[id]
}

func (s *scripted) cancelled(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancels[id]
}

// reply sends reply message seq of call id, naming instance inst ("":
// none, as TrustGraph's Python services), to topic (the reply-to, or the
// response topic).
func (s *scripted) reply(topic, id, inst string, seq int, text string, last bool) {
	props := map[string]string{wire.PropID: id}
	if inst != "" {
		props[wire.PropInstance] = inst
		props[wire.PropSeq] = strconv.Itoa(seq)
	}
	if topic == "" {
		topic = s.target.ResponseTopic
	}
	_ = s.br.Publish(context.Background(), topic, transport.Message{Payload: wire.EncodeResponse(wire.Response{Response: text, EndOfStream: last}), Properties: props})
}

// receipt sends a receipt for call id from instance inst.
func (s *scripted) receipt(topic, id, inst string) {
	_ = s.br.Publish(context.Background(), topic, transport.Message{
		Properties: map[string]string{wire.PropID: id, wire.PropReceipt: "1", wire.PropInstance: inst}})
}

// call makes a call to s and returns it with a channel that gets its
// answer, or the error its reader ended with.
type ended struct {
	text string
	err  error
	at   time.Time
}

func (s *scripted) call(t *testing.T, b *bridge.Bridge, timeout time.Duration) (*bridge.Call, <-chan ended) {
	t.Helper()
	return s.callWith(t, b, timeout, "{}")
}

// callWith is call with arguments args (a JSON object).
func (s *scripted) callWith(t *testing.T, b *bridge.Bridge, timeout time.Duration, args string) (*bridge.Call, <-chan ended) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	c, err := b.Call(ctx, s.target, wire.Request{Config: "{}", Arguments: args}, bridge.CallOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	out := make(chan ended, 1)
	go func() {
		defer cancel()
		text, err := c.Wait(ctx)
		out <- ended{text, err, time.Now()}
	}()
	return c, out
}

func waitEnded(t *testing.T, ch <-chan ended, within time.Duration, what string) ended {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(within):
		t.Fatalf("%s: the call did not end within %v", what, within)
		return ended{}
	}
}

// TestHedgeOnSilence: a call to a service that sends receipts, which has
// heard nothing — no receipt, no reply — for HedgeAfter, is published
// again with the same id, and answered by the instance that takes it the
// second time (a frozen replica had the first); once it is answered so,
// the service is told on its cancel topic, so that the frozen replica
// does not run its copy when it wakes. A call heard of (a receipt) is not
// published again however long it runs; one nobody answers is published
// 1 + 2 times at most; and calls to a service that sends no receipts
// (TrustGraph's Python services) are never published again.
func TestHedgeOnSilence(t *testing.T) {
	t.Parallel()
	br := transport.NewMem()
	t.Cleanup(br.Close)
	name := "hedge-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	const hedgeAfter = 40 * time.Millisecond
	b := bridge.New(br, bridge.Options{ReplyTopic: wire.ReplyTopic(name), HedgeAfter: hedgeAfter, RepublishAfter: time.Second, Logger: testLogger(t)})
	t.Cleanup(b.Close)
	s := newScripted(t, br, name)
	if err := b.ListenAll(t.Context(), func() []string { return []string{s.target.ResponseTopic} }); err != nil {
		t.Fatal(err)
	}
	// The first reply names its instance: later calls ask for receipts.
	s.setScript(func(s *scripted, id, rt string, _ int, _ string) { s.reply(rt, id, "i1", 0, "ok", true) })
	_, out := s.call(t, b, 5*time.Second)
	if e := waitEnded(t, out, 5*time.Second, "first call"); e.err != nil {
		t.Fatal(e.err)
	}

	// The first delivery goes to a frozen replica; the second to i2.
	s.setScript(func(s *scripted, id, rt string, n int, _ string) {
		if n > 1 {
			s.reply(rt, id, "i2", 0, "hedged", true)
		}
	})
	start := time.Now()
	c, out := s.call(t, b, 5*time.Second)
	e := waitEnded(t, out, 5*time.Second, "call to a frozen replica")
	if e.err != nil || e.text != "hedged" {
		t.Fatalf("call to a frozen replica: %q, %v; want the other instance's answer", e.text, e.err)
	}
	took := e.at.Sub(start)
	t.Logf("answered %v after the call (HedgeAfter %v)", took.Round(time.Millisecond), hedgeAfter)
	if took < hedgeAfter {
		t.Fatalf("answered after %v, before HedgeAfter: published again too soon", took)
	}
	if n := s.deliveries(c.ID()); n != 2 {
		t.Fatalf("delivered %d times, want 2", n)
	}
	if st := b.Stats(); st.Hedged != 1 || st.Republished != 1 {
		t.Fatalf("Hedged %d, Republished %d; want 1, 1", st.Hedged, st.Republished)
	}
	waitFor(t, 5*time.Second, func() bool { return s.cancelled(c.ID()) == 1 })

	// A receipt came: not published again, however long it runs.
	release := make(chan struct{})
	s.setScript(func(s *scripted, id, rt string, _ int, _ string) {
		s.receipt(rt, id, "i1")
		go func() { <-release; s.reply(rt, id, "i1", 0, "slow", true) }()
	})
	c, out = s.call(t, b, 5*time.Second)
	waitFor(t, 5*time.Second, func() bool { return b.Stats().Receipts == 1 })
	time.AfterFunc(10*hedgeAfter, func() { close(release) })
	if e := waitEnded(t, out, 5*time.Second, "slow call with a receipt"); e.err != nil || e.text != "slow" {
		t.Fatalf("slow call with a receipt: %q, %v", e.text, e.err)
	}
	if n := s.deliveries(c.ID()); n != 1 || b.Stats().Hedged != 1 {
		t.Fatalf("a call with a receipt delivered %d times, %d hedged in all; want once, 1", n, b.Stats().Hedged)
	}
	if n := s.cancelled(c.ID()); n != 0 {
		t.Fatalf("a call published once told its service to cancel %d times on its end", n)
	}

	// Nobody answers: published again twice, no more.
	s.setScript(nil)
	c, out = s.call(t, b, 20*hedgeAfter)
	if e := waitEnded(t, out, 5*time.Second, "call nobody answers"); !errors.Is(e.err, context.DeadlineExceeded) {
		t.Fatalf("call nobody answers: %v, want the deadline", e.err)
	}
	if n := s.deliveries(c.ID()); n != 3 {
		t.Fatalf("a call nobody answers delivered %d times, want 1 + 2", n)
	}
}

// TestNoHedgeWithoutReceipts: a service that never names an instance on
// its replies (TrustGraph's Python services) sends no receipts, so its
// silence says nothing: its calls are not published again.
func TestNoHedgeWithoutReceipts(t *testing.T) {
	t.Parallel()
	br := transport.NewMem()
	t.Cleanup(br.Close)
	name := "nohedge-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	b := bridge.New(br, bridge.Options{ReplyTopic: wire.ReplyTopic(name), HedgeAfter: 20 * time.Millisecond, RepublishAfter: 40 * time.Millisecond, Logger: testLogger(t)})
	t.Cleanup(b.Close)
	s := newScripted(t, br, name)
	if err := b.ListenAll(t.Context(), func() []string { return []string{s.target.ResponseTopic} }); err != nil {
		t.Fatal(err)
	}
	s.setScript(func(s *scripted, id, _ string, _ int, _ string) { s.reply("", id, "", 0, "ok", true) })
	_, out := s.call(t, b, 5*time.Second)
	if e := waitEnded(t, out, 5*time.Second, "first call"); e.err != nil {
		t.Fatal(e.err)
	}
	s.setScript(nil)
	c, out := s.call(t, b, 500*time.Millisecond)
	if e := waitEnded(t, out, 5*time.Second, "unanswered call"); !errors.Is(e.err, context.DeadlineExceeded) {
		t.Fatalf("unanswered call: %v, want the deadline", e.err)
	}
	if n := s.deliveries(c.ID()); n != 1 || b.Stats().Hedged != 0 || b.Stats().Republished != 0 {
		t.Fatalf("delivered %d times, %d hedged; want once, none", n, b.Stats().Hedged)
	}
}

// TestInstanceLostEndsItsCalls: when an instance is lost (its lease ran
// out), the calls it said it had — a receipt from it alone, or replies
// taken from it — end at once with ErrInstanceLost (and ErrServiceGone,
// for callers that know only that); a call another instance also sent a
// receipt for goes on until that one is lost too; calls of other
// instances, and calls that heard nothing, go on.
func TestInstanceLostEndsItsCalls(t *testing.T) {
	t.Parallel()
	br := transport.NewMem()
	t.Cleanup(br.Close)
	name := "lost-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	b := bridge.New(br, bridge.Options{ReplyTopic: wire.ReplyTopic(name), HedgeAfter: time.Hour, RepublishAfter: time.Hour, Logger: testLogger(t)})
	t.Cleanup(b.Close)
	s := newScripted(t, br, name)
	if err := b.ListenAll(t.Context(), func() []string { return []string{s.target.ResponseTopic} }); err != nil {
		t.Fatal(err)
	}
	s.setScript(func(s *scripted, id, rt string, _ int, _ string) { s.reply(rt, id, "i1", 0, "ok", true) })
	_, out := s.call(t, b, 5*time.Second)
	if e := waitEnded(t, out, 5*time.Second, "first call"); e.err != nil {
		t.Fatal(e.err)
	}
	// What each call's service does, by its arguments.
	type plan struct {
		Receipts  string `json:"receipts"`   // digits: from instances "i<digit>"
		ChunkFrom string `json:"chunk_from"` // a stream's first chunk, from this instance
	}
	s.setScript(func(s *scripted, id, rt string, _ int, args string) {
		var p plan
		if err := json.Unmarshal([]byte(args), &p); err != nil {
			t.Errorf("arguments %q: %v", args, err)
		}
		for _, inst := range []byte(p.Receipts) {
			s.receipt(rt, id, "i"+string(inst))
		}
		if p.ChunkFrom != "" {
			s.reply(rt, id, p.ChunkFrom, 0, "0,", false)
		}
	})
	cases := []struct {
		name string
		plan plan
	}{
		{"a receipt from i1", plan{Receipts: "1"}},
		{"receipts from i1 and i2", plan{Receipts: "12"}},
		{"a receipt from i2", plan{Receipts: "2"}},
		{"a stream's first chunk from i1", plan{ChunkFrom: "i1"}},
		{"nothing heard", plan{}},
	}
	outs := make([]<-chan ended, len(cases))
	for i, c := range cases {
		args, err := json.Marshal(c.plan)
		if err != nil {
			t.Fatal(err)
		}
		_, outs[i] = s.callWith(t, b, 20*time.Second, string(args))
	}
	// Every receipt and chunk taken.
	waitFor(t, 5*time.Second, func() bool { return b.Stats().Receipts == 4 && b.Stats().Replies == 2 })
	start := time.Now()
	b.InstanceLost(s.target.RequestTopic, "i1")
	for _, i := range []int{0, 3} {
		e := waitEnded(t, outs[i], 5*time.Second, cases[i].name)
		if !errors.Is(e.err, bridge.ErrInstanceLost) || !errors.Is(e.err, bridge.ErrServiceGone) {
			t.Fatalf("%s: %v, want ErrInstanceLost", cases[i].name, e.err)
		}
		t.Logf("%s: ended %v after the loss: %v", cases[i].name, e.at.Sub(start).Round(time.Microsecond), e.err)
	}
	if n := b.Stats().InstanceLost; n != 2 {
		t.Fatalf("Stats.InstanceLost %d, want 2", n)
	}
	for _, i := range []int{1, 2, 4} {
		select {
		case e := <-outs[i]:
			t.Fatalf("%s: ended when i1 was lost: %v", cases[i].name, e.err)
		default:
		}
	}
	b.InstanceLost(s.target.RequestTopic, "i2")
	for _, i := range []int{1, 2} {
		if e := waitEnded(t, outs[i], 5*time.Second, cases[i].name); !errors.Is(e.err, bridge.ErrInstanceLost) {
			t.Fatalf("%s, i2 lost too: %v, want ErrInstanceLost", cases[i].name, e.err)
		}
	}
	select {
	case e := <-outs[4]:
		t.Fatalf("a call that heard nothing ended when instances were lost: %v", e.err)
	default:
	}
}

// TestWatchFindsInstancesLost: the watch asks the cancel topic of a
// service whose calls ask for receipts which instances are there (each
// Go SDK instance subscribes there as "<id>-cancel-<instance>"); an
// instance seen there before and missing now is lost, and the calls it
// sent a receipt for end with ErrInstanceLost — at the first question
// that misses it when no consumer connected since the previous one, at
// the second otherwise (a topic that moves comes back consumer by
// consumer). An instance never seen there is not judged.
func TestWatchFindsInstancesLost(t *testing.T) {
	t.Parallel()
	br := transport.NewMem()
	t.Cleanup(br.Close)
	stub := &consumersStub{ids: map[string][]transport.Consumer{}, asked: map[string]int{}}
	name := "watchlost-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	b := bridge.New(br, bridge.Options{ReplyTopic: wire.ReplyTopic(name), HedgeAfter: time.Hour, RepublishAfter: time.Hour,
		Watch: stub, WatchEvery: 20 * time.Millisecond, Logger: testLogger(t)})
	t.Cleanup(b.Close)
	s := newScripted(t, br, name)
	if err := b.ListenAll(t.Context(), func() []string { return []string{s.target.ResponseTopic} }); err != nil {
		t.Fatal(err)
	}
	cancelTopic := wire.CancelTopic(s.target.RequestTopic)
	long := time.Now().Add(-time.Hour)
	inst := func(i string, since time.Time) transport.Consumer {
		return transport.Consumer{ID: i, Name: "echo-cancel-" + i + "/c" + i, Since: since}
	}
	stub.setConsumers(s.target.RequestTopic, transport.Consumer{ID: "a", Name: "echo-request/a", Since: long})
	stub.setConsumers(cancelTopic, inst("i1", long), inst("i2", long), inst("i3", long))
	s.setScript(func(s *scripted, id, rt string, _ int, _ string) { s.reply(rt, id, "i1", 0, "ok", true) })
	_, out := s.call(t, b, 5*time.Second)
	if e := waitEnded(t, out, 5*time.Second, "first call"); e.err != nil {
		t.Fatal(e.err)
	}
	// Each call's receipt comes from the instance its arguments name.
	s.setScript(func(s *scripted, id, rt string, _ int, args string) {
		var a struct {
			From string `json:"from"`
		}
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			t.Errorf("arguments %q: %v", args, err)
		}
		s.receipt(rt, id, a.From)
	})
	call := func(i string) <-chan ended {
		n := b.Stats().Receipts
		_, out := s.callWith(t, b, 20*time.Second, `{"from":"`+i+`"}`)
		waitFor(t, 5*time.Second, func() bool { return b.Stats().Receipts == n+1 })
		return out
	}
	on1, on2, on3, onNever := call("i1"), call("i2"), call("i3"), call("i9")
	asked := func() int { return stub.questions(cancelTopic) }
	waitFor(t, 5*time.Second, func() bool { return len(b.WatchedInstances(s.target.RequestTopic)) == 3 })

	// i1 killed: missing at a settled answer, its call ends at once.
	stub.setConsumers(cancelTopic, inst("i2", long), inst("i3", long))
	if e := waitEnded(t, on1, 5*time.Second, "call on i1"); !errors.Is(e.err, bridge.ErrInstanceLost) {
		t.Fatalf("call on i1: %v, want ErrInstanceLost", e.err)
	}
	// i2 missing while another consumer just connected (the topic moving,
	// consumers coming back): judged at the second question only. Missing
	// at one question, back at the next: its call goes on.
	fresh := inst("i3", time.Now().Add(time.Minute))
	n := asked()
	stub.answerNext(cancelTopic, []transport.Consumer{fresh}, []transport.Consumer{inst("i2", long), fresh})
	waitFor(t, 5*time.Second, func() bool { return asked() >= n+4 })
	select {
	case e := <-on2:
		t.Fatalf("call on i2, back after one question: %v", e.err)
	default:
	}
	n = asked()
	stub.answerNext(cancelTopic, []transport.Consumer{fresh}, []transport.Consumer{fresh})
	if e := waitEnded(t, on2, 5*time.Second, "call on i2"); !errors.Is(e.err, bridge.ErrInstanceLost) {
		t.Fatalf("call on i2: %v, want ErrInstanceLost", e.err)
	}
	if got := asked() - n; got < 2 {
		t.Fatalf("call on i2 ended after %d questions in an unsettled time, want 2", got)
	}
	// i3 stays; i9 was never seen there: neither call ends.
	n = asked()
	waitFor(t, 5*time.Second, func() bool { return asked() >= n+3 })
	for what, ch := range map[string]<-chan ended{"call on i3": on3, "call on an instance never seen": onNever} {
		select {
		case e := <-ch:
			t.Fatalf("%s ended: %v", what, e.err)
		default:
		}
	}
	if n := b.Stats().InstanceLost; n != 2 {
		t.Fatalf("Stats.InstanceLost %d, want 2", n)
	}
}
