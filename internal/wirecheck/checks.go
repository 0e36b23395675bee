package wirecheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// settle is how long a rule on what must not arrive waits for it.
const settle = 500 * time.Millisecond

func checkIDs(ctx context.Context, s *Session) error {
	id, ms, err := s.quick(ctx, "id", wire.CallWords{})
	if err != nil {
		return err
	}
	for _, g := range ms {
		if got := g.msg.Properties[wire.PropID]; got != id {
			return fmt.Errorf("a reply carries id %q, want %q", got, id)
		}
	}
	// Without an id: answered as "unknown" (TrustGraph's rule), on the
	// response topic or the reply topic.
	before := len(finals(s.of("unknown")))
	if err := s.send(ctx, "", s.t.Quick, s.words(wire.CallWords{}), nil); err != nil {
		return err
	}
	if !s.wait(ctx, 5*time.Second, s.hasFinal("unknown", before+1)) {
		return errors.New(`a request without an id was not answered with id "unknown" within 5 s`)
	}
	return nil
}

// messagesOf are id's reply messages, receipts left out.
func messagesOf(ms []got) []got {
	var out []got
	for _, g := range ms {
		if !isReceipt(g.msg) {
			out = append(out, g)
		}
	}
	return out
}

// ended makes a call (the stream when the target has one, else the quick
// one), waits for its end, and a moment more for anything after it.
func (s *Session) ended(ctx context.Context, what string, stream bool) (string, []got, error) {
	args := s.t.Quick
	if stream {
		args = s.t.Stream
	}
	id := s.newID(what)
	if err := s.send(ctx, id, args, s.words(wire.CallWords{Credit: 1 << 20}), nil); err != nil {
		return id, nil, err
	}
	if !s.wait(ctx, 15*time.Second, s.hasFinal(id, 1)) {
		return id, s.of(id), fmt.Errorf("the call %q did not end within 15 s (%d messages with its id; %s)", id, len(s.of(id)), s.strangers())
	}
	quiet(ctx, settle)
	return id, messagesOf(s.of(id)), nil
}

func checkEnd(ctx context.Context, s *Session) error {
	for _, stream := range []bool{false, true} {
		if stream && s.t.Stream == nil {
			continue
		}
		id, ms, err := s.ended(ctx, "end", stream)
		if err != nil {
			return err
		}
		for i, g := range ms {
			r, ok := decode(g.msg)
			if !ok {
				return fmt.Errorf("call %q: message %d is not a response: %.80q", id, i, g.msg.Payload)
			}
			if last := i == len(ms)-1; r.EndOfStream != last {
				return fmt.Errorf("call %q: message %d of %d has end_of_stream %v", id, i, len(ms), r.EndOfStream)
			}
		}
		if stream && len(ms) < 3 {
			return fmt.Errorf("the stream call %q was answered in %d messages; the target says at least 3", id, len(ms))
		}
	}
	return nil
}

func checkSeq(ctx context.Context, s *Session) error {
	for _, stream := range []bool{false, true} {
		if stream && s.t.Stream == nil {
			continue
		}
		id, ms, err := s.ended(ctx, "seq", stream)
		if err != nil {
			return err
		}
		for i, g := range ms {
			seq, ok := g.msg.Properties[wire.PropSeq]
			if !ok {
				return fmt.Errorf("call %q: message %d has no %s", id, i, wire.PropSeq)
			}
			if seq != strconv.Itoa(i) {
				return fmt.Errorf("call %q: message %d is numbered %s=%q (a hole, a repeat or out of order)", id, i, wire.PropSeq, seq)
			}
		}
	}
	return nil
}

func checkReplyTo(ctx context.Context, s *Session) error {
	id, _, err := s.quick(ctx, "reply-to", wire.CallWords{})
	if err != nil {
		return err
	}
	quiet(ctx, settle)
	for _, g := range s.of(id) {
		if g.topic != s.replyTopic {
			return fmt.Errorf("a reply to a request naming reply-to %s arrived on %s", s.replyTopic, g.topic)
		}
	}
	// The property of its own, as older callers write it.
	id2 := s.newID("reply-to-prop")
	if err := s.send(ctx, id2, s.t.Quick, wire.CallWords{}, map[string]string{wire.PropReplyTo: s.replyTopic}); err != nil {
		return err
	}
	if !s.wait(ctx, 10*time.Second, s.hasFinal(id2, 1)) {
		return errors.New("no reply to a request with the reply-to property of its own")
	}
	if g := s.of(id2)[0]; g.topic != s.replyTopic {
		return fmt.Errorf("a request with the reply-to property was answered on %s", g.topic)
	}
	// None, and one outside the response namespace: the response topic.
	for _, w := range []wire.CallWords{{}, {ReplyTo: s.hostile}} {
		id := s.newID("reply-to-other")
		if err := s.send(ctx, id, s.t.Quick, w, nil); err != nil {
			return err
		}
		if !s.wait(ctx, 10*time.Second, s.hasFinal(id, 1)) {
			return fmt.Errorf("no reply to a request with reply-to %q", w.ReplyTo)
		}
		quiet(ctx, settle)
		for _, g := range s.of(id) {
			if g.topic != s.t.ResponseTopic {
				return fmt.Errorf("a request with reply-to %q was answered on %s, not the response topic", w.ReplyTo, g.topic)
			}
		}
	}
	return nil
}

func checkInstance(ctx context.Context, s *Session) error {
	calls := []bool{false}
	if s.t.Stream != nil {
		calls = append(calls, true)
	}
	for _, stream := range calls {
		id, ms, err := s.ended(ctx, "instance", stream)
		if err != nil {
			return err
		}
		inst := ms[0].msg.Properties[wire.PropInstance]
		for i, g := range ms {
			if v := g.msg.Properties[wire.PropInstance]; v == "" || v != inst {
				return fmt.Errorf("call %q: message %d names instance %q (the first named %q)", id, i, v, inst)
			}
		}
	}
	return nil
}

// slowCall starts a slow call asking for a receipt and returns once its
// receipt came.
func (s *Session) slowCall(ctx context.Context, what string, w wire.CallWords) (string, error) {
	if s.t.Slow == nil {
		return "", skip("the target gives no slow call")
	}
	id := s.newID(what)
	w.Receipt = true
	if err := s.send(ctx, id, s.t.Slow, s.words(w), nil); err != nil {
		return id, err
	}
	if !s.wait(ctx, 5*time.Second, s.hasReceipt(id, 1)) {
		return id, fmt.Errorf("a slow call asking for a receipt got none within 5 s (%d messages with its id; %s)", len(s.of(id)), s.strangers())
	}
	return id, nil
}

func checkReceipt(ctx context.Context, s *Session) error {
	start := time.Now()
	id, err := s.slowCall(ctx, "receipt", wire.CallWords{})
	if err != nil {
		return err
	}
	ms := s.of(id)
	if len(finals(ms)) > 0 {
		return errors.New("the receipt came after the reply")
	}
	r := ms[0].msg
	if r.Properties[wire.PropInstance] == "" {
		return errors.New("the receipt names no instance")
	}
	if !s.wait(ctx, s.t.SlowFor+10*time.Second, s.hasFinal(id, 1)) {
		return errors.New("the slow call was not answered after its receipt")
	}
	if f := finals(s.of(id))[0]; f.Error != nil {
		return fmt.Errorf("the slow call failed: %s", describe(f.Error))
	}
	if el := time.Since(start); el < s.t.SlowFor/2 {
		return fmt.Errorf("the slow call was answered after %v; the target says it takes %v", el, s.t.SlowFor)
	}
	return nil
}

func checkDuplicateRunning(ctx context.Context, s *Session) error {
	id, err := s.slowCall(ctx, "dup-running", wire.CallWords{})
	if err != nil {
		return err
	}
	if err := s.send(ctx, id, s.t.Slow, s.words(wire.CallWords{Receipt: true}), nil); err != nil {
		return err
	}
	if !s.wait(ctx, 2*time.Second, s.hasReceipt(id, 2)) {
		return errors.New("a request published again while its call ran got no receipt within 2 s")
	}
	if !s.wait(ctx, s.t.SlowFor+10*time.Second, s.hasFinal(id, 1)) {
		return errors.New("the slow call was not answered")
	}
	quiet(ctx, s.t.SlowFor/2+settle)
	if n := len(finals(s.of(id))); n != 1 {
		return fmt.Errorf("a call published twice while it ran was answered %d times: it ran twice", n)
	}
	return nil
}

func checkDuplicateEnded(ctx context.Context, s *Session) error {
	id, _, err := s.quick(ctx, "dup-ended", wire.CallWords{Receipt: true})
	if err != nil {
		return err
	}
	first := finals(s.of(id))[0]
	if err := s.send(ctx, id, s.t.Quick, s.words(wire.CallWords{Receipt: true}), nil); err != nil {
		return err
	}
	if !s.wait(ctx, 5*time.Second, s.hasFinal(id, 2)) {
		return errors.New("a request published again after its call ended did not get the kept reply within 5 s")
	}
	if again := finals(s.of(id))[1]; again.Response != first.Response {
		return fmt.Errorf("the reply sent again differs from the first (%.60q, then %.60q): the call ran again", first.Response, again.Response)
	}
	if err := s.control(ctx, id, wire.CreditResend); err != nil {
		return err
	}
	if !s.wait(ctx, 5*time.Second, s.hasFinal(id, 3)) {
		return errors.New("a resend on the cancel topic did not bring the kept reply within 5 s")
	}
	return nil
}

func checkCancel(ctx context.Context, s *Session) error {
	start := time.Now()
	id, err := s.slowCall(ctx, "cancel", wire.CallWords{})
	if err != nil {
		return err
	}
	if err := s.control(ctx, id, wire.CreditCancel); err != nil {
		return err
	}
	if !s.wait(ctx, s.t.SlowFor+10*time.Second, s.hasFinal(id, 1)) {
		return errors.New("a cancelled call was never answered")
	}
	f := finals(s.of(id))[0]
	if f.Error == nil || f.Error.Type != "cancelled" {
		return fmt.Errorf("a cancelled call answered %.60q, error %s; want error type cancelled", f.Response, describe(f.Error))
	}
	if el := time.Since(start); el > s.t.SlowFor {
		return fmt.Errorf("a call cancelled at once was answered after %v, when it would have ended anyway", el)
	}
	// A cancel ahead of its request.
	early := s.newID("cancel-early")
	if err := s.control(ctx, early, wire.CreditCancel); err != nil {
		return err
	}
	if err := s.send(ctx, early, s.t.Quick, s.words(wire.CallWords{}), nil); err != nil {
		return err
	}
	s.wait(ctx, 2*time.Second, s.hasFinal(early, 1))
	if fs := finals(s.of(early)); len(fs) > 0 && fs[0].Error == nil {
		return errors.New("a call cancelled before its request arrived ran")
	}
	return nil
}

func checkDeadline(ctx context.Context, s *Session) error {
	id := s.newID("deadline-past")
	if err := s.send(ctx, id, s.t.Quick, s.words(wire.CallWords{Deadline: time.Now().Add(-10 * time.Second).UnixMilli()}), nil); err != nil {
		return err
	}
	s.wait(ctx, 2*time.Second, s.hasFinal(id, 1))
	if fs := finals(s.of(id)); len(fs) > 0 && fs[0].Error == nil {
		return errors.New("a request 10 s past its deadline was run")
	}
	if _, _, err := s.quick(ctx, "after-deadline", wire.CallWords{}); err != nil {
		return fmt.Errorf("after a request past its deadline: %w", err)
	}
	if s.t.Slow == nil {
		return nil
	}
	slow := s.newID("deadline-passes")
	in := min(s.t.SlowFor/3, time.Second)
	if err := s.send(ctx, slow, s.t.Slow, s.words(wire.CallWords{Deadline: time.Now().Add(in).UnixMilli()}), nil); err != nil {
		return err
	}
	if !s.wait(ctx, s.t.SlowFor+10*time.Second, s.hasFinal(slow, 1)) {
		return errors.New("a call whose deadline passed while it ran was never answered")
	}
	if f := finals(s.of(slow))[0]; f.Error == nil || f.Error.Type != "timeout" {
		return fmt.Errorf("a call whose deadline passed while it ran answered %.60q, error %s; want error type timeout", f.Response, describe(f.Error))
	}
	return nil
}

func checkHostile(ctx context.Context, s *Session) error {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	many := map[string]string{}
	for i := range 3000 {
		many["x-wirecheck-"+strconv.Itoa(i)] = "v"
	}
	cases := []struct {
		what string
		// payload, when malformed; nil: a well-formed request (with the
		// properties props), which may be answered either way.
		payload []byte
		props   map[string]string
	}{
		{"bad JSON", []byte(`{"config": "{}", "arguments": `), nil},
		{"not an object", []byte(`[1, 2, 3]`), nil},
		{"empty payload", []byte{}, nil},
		{"arguments an object, not a string", []byte(`{"config": "{}", "arguments": {"a": 1}}`), nil},
		{"arguments not JSON", []byte(`{"config": "{}", "arguments": "{nope"}`), nil},
		{"arguments nested 100,000 deep", []byte(`{"config": "{}", "arguments": "{\"a\": ` + deep + `}"}`), nil},
		{"config an array", []byte(`{"config": "[1]", "arguments": "{}"}`), nil},
		{"a 64 KiB id", nil, map[string]string{wire.PropID: strings.Repeat("i", 64<<10)}},
		{"3,000 properties", nil, many},
		{"a 1 MiB property", nil, map[string]string{"x-wirecheck-big": strings.Repeat("b", 1<<20)}},
		{"credit and deadline not numbers", nil, map[string]string{wire.PropCall: "credit=many;deadline-ms=soon;receipt=yes;zzz=1"}},
	}
	type sent struct{ id, what string }
	var malformed []sent
	for _, c := range cases {
		id := s.newID("hostile")
		props := map[string]string{wire.PropID: id, wire.PropCall: string(wire.AppendCall(nil, s.words(wire.CallWords{})))}
		for k, v := range c.props {
			props[k] = v
		}
		payload := c.payload
		if payload == nil {
			a, _ := json.Marshal(s.t.Quick)
			payload = wire.EncodeRequest(wire.Request{User: "wirecheck", Config: s.config(), Arguments: string(a)})
		} else {
			malformed = append(malformed, sent{id, c.what})
		}
		if err := s.publish(ctx, payload, props); err != nil {
			return fmt.Errorf("%s: %w", c.what, err)
		}
	}
	// The service still answers, and answered none of the malformed ones
	// with success.
	if _, _, err := s.quick(ctx, "after-hostile", wire.CallWords{}); err != nil {
		return fmt.Errorf("after hostile requests the service no longer answers: %w", err)
	}
	quiet(ctx, settle)
	for _, m := range malformed {
		if fs := finals(s.of(m.id)); len(fs) > 0 && fs[0].Error == nil {
			return fmt.Errorf("a malformed request (%s) was answered with success: %.60q", m.what, fs[0].Response)
		}
	}
	return nil
}

func (s *Session) config() string {
	if s.t.Tool == "" {
		return "{}"
	}
	c, _ := json.Marshal(map[string]string{"toolgate-tool": s.t.Tool})
	return string(c)
}

// announcements follows the announcement topic, keeping what arrives for
// key; stop ends it.
type announcements struct {
	mu   sync.Mutex
	msgs []transport.Message
	err  error
}

func (a *announcements) all() ([]transport.Message, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]transport.Message(nil), a.msgs...), a.err
}

func (s *Session) follow(ctx context.Context, key string) (*announcements, func(), error) {
	if s.t.ServiceID == "" || s.t.AnnounceTopic == "" {
		return nil, nil, skip("the target names no service id and announcement topic")
	}
	f, ok := s.br.(Follower)
	if !ok {
		return nil, nil, skip("the broker client cannot read tables")
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &announcements{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := f.Follow(ctx, s.t.AnnounceTopic, s.prefix+"-announcements", func(m transport.Message) {
			if m.Key == key {
				a.mu.Lock()
				a.msgs = append(a.msgs, m)
				a.mu.Unlock()
			}
		}, func() {})
		a.mu.Lock()
		a.err = err
		a.mu.Unlock()
	}()
	return a, func() { cancel(); <-done }, nil
}

func pollUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) || ctx.Err() != nil {
			return false
		}
		quiet(ctx, 20*time.Millisecond)
	}
	return true
}

func checkAnnouncement(ctx context.Context, s *Session) error {
	if s.t.ServiceID == "" || s.t.AnnounceTopic == "" {
		return skip("the target names no service id and announcement topic")
	}
	if _, _, err := s.quick(ctx, "announce", wire.CallWords{}); err != nil {
		return err
	}
	if s.instance == "" {
		return errors.New("the service names no instance on its replies: it cannot be announced per instance")
	}
	key := wire.AnnounceKey(s.t.ServiceID, s.instance)
	a, stop, err := s.follow(ctx, key)
	if err != nil {
		return err
	}
	defer stop()
	if !pollUntil(ctx, 10*time.Second, func() bool { ms, _ := a.all(); return len(ms) > 0 }) {
		if _, ferr := a.all(); ferr != nil {
			return fmt.Errorf("no announcement keyed %q on %s: %w", key, s.t.AnnounceTopic, ferr)
		}
		return fmt.Errorf("no announcement keyed %q on %s within 10 s", key, s.t.AnnounceTopic)
	}
	ms, _ := a.all()
	m := ms[len(ms)-1]
	if m.Properties[wire.PropInstance] != s.instance {
		return fmt.Errorf("the announcement names instance %q, the replies %q", m.Properties[wire.PropInstance], s.instance)
	}
	lease, err := time.ParseDuration(m.Properties[wire.PropLease])
	if err != nil || lease <= 0 {
		return fmt.Errorf("the announcement's lease %q is not a positive duration", m.Properties[wire.PropLease])
	}
	var doc struct {
		Services map[string]struct {
			RequestQueue string `json:"request-queue"`
		} `json:"tool-service"`
		Tools map[string]struct {
			Service string `json:"service"`
		} `json:"tool"`
	}
	if err := json.Unmarshal(m.Payload, &doc); err != nil {
		return fmt.Errorf("the announcement is not a registry document: %w", err)
	}
	svc, ok := doc.Services[s.t.ServiceID]
	if !ok {
		return fmt.Errorf("the announcement does not declare the service %q", s.t.ServiceID)
	}
	if q, err := wire.ExpandQueue(svc.RequestQueue); err != nil || q != s.t.RequestTopic {
		return fmt.Errorf("the announced request queue %q is not the service's %s", svc.RequestQueue, s.t.RequestTopic)
	}
	if len(doc.Tools) == 0 {
		return errors.New("the announcement announces no tool")
	}
	if lease > 20*time.Second {
		return nil // a renewal would take too long to wait for here
	}
	n := len(ms)
	if !pollUntil(ctx, lease, func() bool { ms, _ := a.all(); return len(ms) > n }) {
		return fmt.Errorf("the announcement (lease %v) was not renewed within its lease", lease)
	}
	return nil
}

func checkStop(ctx context.Context, s *Session) error {
	if s.t.Stop == nil {
		return skip("the target gives no way to stop the service")
	}
	var a *announcements
	if s.t.ServiceID != "" && s.t.AnnounceTopic != "" {
		if _, _, err := s.quick(ctx, "before-stop", wire.CallWords{}); err != nil {
			return err
		}
		var stop func()
		var err error
		if a, stop, err = s.follow(ctx, wire.AnnounceKey(s.t.ServiceID, s.instance)); err != nil && !errors.Is(err, ErrSkipped) {
			return err
		} else if err == nil {
			defer stop()
		}
	}
	var inFlight string
	if s.t.Slow != nil {
		id, err := s.slowCall(ctx, "in-flight", wire.CallWords{})
		if err != nil {
			return err
		}
		inFlight = id
	}
	if err := s.t.Stop(ctx); err != nil {
		return fmt.Errorf("stop the service: %w", err)
	}
	if a != nil && !pollUntil(ctx, 5*time.Second, func() bool {
		ms, _ := a.all()
		return len(ms) > 0 && ms[len(ms)-1].Payload == nil && ms[len(ms)-1].Properties[wire.PropWithdrawn] == "true"
	}) {
		return errors.New("the stopping instance was not withdrawn within 5 s")
	}
	if inFlight != "" {
		if !s.wait(ctx, s.t.SlowFor+10*time.Second, s.hasFinal(inFlight, 1)) {
			return errors.New("the call in flight at the stop was never answered")
		}
		if f := finals(s.of(inFlight))[0]; f.Error != nil {
			return fmt.Errorf("the call in flight at the stop failed: %s", describe(f.Error))
		}
	}
	return nil
}

// describe is a reply's error as a report shows it.
func describe(e *wire.Error) string {
	if e == nil {
		return "none"
	}
	return e.Type + ": " + e.Message
}
