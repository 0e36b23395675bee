// Package wirecheck checks a tool service against toolgate's wire contract
// (docs/wire.md, the package wire) over a real broker, playing the
// gateway's side: it publishes requests as a gateway does and reads what
// the service answers, one rule at a time — ids echoed, chunks numbered,
// one end of stream, reply-to honoured (and only within the response
// namespace), the instance named, receipts for slow calls and for
// duplicates (a duplicate never runs twice), the kept reply sent again,
// cancels, deadlines, malformed and hostile requests, the announcement
// with its lease, and the graceful stop with its withdrawal.
//
// Any implementation can be checked: the Go SDK, the Python SDK, a
// TrustGraph service converted with the Python SDK's adapter, or a third
// party's. Run it from a test with Run, or as a program with
// cmd/wirecheck. A rule that needs what the target does not offer (a slow
// call, a streamed one, an announcement, a way to stop it) is skipped,
// saying so.
package wirecheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/randid"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// Target is the service checked, and the calls it answers.
type Target struct {
	// RequestTopic and ResponseTopic are the service's topics (full names).
	RequestTopic, ResponseTopic string
	// Tool, when set, is sent as the config value wire's "toolgate-tool"
	// names, for a service of several tools.
	Tool string
	// Quick are the arguments of a call the service answers at once,
	// successfully; nil: {}.
	Quick map[string]any
	// Stream are the arguments of a call answered in at least three
	// reply messages; nil skips the rules on streams.
	Stream map[string]any
	// Slow are the arguments of a call answered successfully after at
	// least SlowFor; nil skips the rules that need one.
	Slow map[string]any
	// SlowFor is how long a Slow call takes at least (default 2 s).
	SlowFor time.Duration
	// ServiceID and AnnounceTopic, both set, check the service's
	// announcements there (keyed "<ServiceID>@<instance>"); the broker
	// given to New must then read tables (Follower).
	ServiceID, AnnounceTopic string
	// Stop, when set, stops the service gracefully (SIGTERM, a context
	// cancelled) and returns once it was told; it is the last rule's.
	Stop func(ctx context.Context) error
}

// Follower reads a persistent topic's compacted view from its start, then
// what comes (pulsarbroker.Pulsar does).
type Follower interface {
	Follow(ctx context.Context, topic, name string, apply func(transport.Message), caughtUp func()) error
}

// ErrSkipped is wrapped by a check's error when the rule does not apply to
// the target (it offers no slow call, announces nothing, …).
var ErrSkipped = errors.New("not applicable")

// Skipped reports whether a check's error says its rule does not apply.
func Skipped(err error) bool { return errors.Is(err, ErrSkipped) }

func skip(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSkipped}, args...)...)
}

// Check is one rule of the contract.
type Check struct {
	Name string
	// Rule says what the service must do, for a report.
	Rule string
	Run  func(ctx context.Context, s *Session) error
}

// got is a message received on one of the session's topics.
type got struct {
	topic string
	msg   transport.Message
}

// Session is the gateway's side of the checks: a reply topic of its own,
// a listener on the response topic, and what arrived on them, by call id.
type Session struct {
	t          Target
	br         transport.Broker
	replyTopic string
	// hostile is a topic outside the response namespace a request names
	// as its reply-to; nothing may arrive there.
	hostile string
	subs    []transport.Subscription
	prefix  string
	n       atomic.Int64
	// instance is the one that answered the last quick call.
	instance string

	mu      sync.Mutex
	byID    map[string][]got
	ids     []string // ids of every message, in order of arrival (bounded)
	arrived chan struct{}
}

// New subscribes the session's topics. Close it.
func New(ctx context.Context, br transport.Broker, t Target) (*Session, error) {
	if t.RequestTopic == "" || t.ResponseTopic == "" {
		return nil, errors.New("wirecheck: the target needs a request and a response topic")
	}
	if t.SlowFor <= 0 {
		t.SlowFor = 2 * time.Second
	}
	if t.Quick == nil {
		t.Quick = map[string]any{}
	}
	inst := "wirecheck-" + randid.New()[:12]
	ns := t.ResponseTopic[:strings.LastIndexByte(t.ResponseTopic, '/')+1]
	s := &Session{t: t, br: br, prefix: inst, byID: map[string][]got{}, arrived: make(chan struct{}),
		replyTopic: ns + wire.ReplyTopicPrefix + inst,
		hostile:    wire.RequestTopic(inst + "-hostile")}
	if !wire.ReplyToAllowed(s.replyTopic, t.ResponseTopic) {
		return nil, fmt.Errorf("wirecheck: response topic %q: no reply topic of a gateway fits beside it", t.ResponseTopic)
	}
	for _, topic := range []string{s.replyTopic, t.ResponseTopic, s.hostile} {
		sub, err := br.Subscribe(ctx, topic, inst, transport.Exclusive, func(m transport.Message) { s.take(topic, m) })
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("wirecheck: subscribe %s: %w", topic, err)
		}
		s.subs = append(s.subs, sub)
	}
	return s, nil
}

// Close detaches the session's subscriptions.
func (s *Session) Close() {
	for _, sub := range s.subs {
		_ = sub.Close()
	}
	s.subs = nil
}

func (s *Session) take(topic string, m transport.Message) {
	id := m.Properties[wire.PropID]
	s.mu.Lock()
	s.byID[id] = append(s.byID[id], got{topic: topic, msg: m})
	if len(s.ids) < 10000 {
		s.ids = append(s.ids, id)
	}
	close(s.arrived)
	s.arrived = make(chan struct{})
	s.mu.Unlock()
}

// wait waits until cond holds (checked on every arrival), d at most.
func (s *Session) wait(ctx context.Context, d time.Duration, cond func() bool) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		s.mu.Lock()
		ok, ch := cond(), s.arrived
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-timer.C:
			s.mu.Lock()
			defer s.mu.Unlock()
			return cond()
		case <-ctx.Done():
			return false
		}
	}
}

// quiet waits d for anything more to arrive, for rules on what must not.
func quiet(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// of returns the messages of id (callers hold s.mu or accept a copy).
func (s *Session) of(id string) []got {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.byID[id])
}

// finals are the messages of id that end a reply, decoded.
func finals(ms []got) []wire.Response {
	var out []wire.Response
	for _, g := range ms {
		if r, ok := decode(g.msg); ok && r.EndOfStream {
			out = append(out, r)
		}
	}
	return out
}

func decode(m transport.Message) (wire.Response, bool) {
	if len(m.Payload) == 0 {
		return wire.Response{}, false
	}
	r, err := wire.DecodeResponse(m.Payload)
	return r, err == nil
}

func isReceipt(m transport.Message) bool {
	return len(m.Payload) == 0 && m.Properties[wire.PropReceipt] == "1"
}

// hasFinal is a condition: id's reply ended (callers of wait hold s.mu).
func (s *Session) hasFinal(id string, n int) func() bool {
	return func() bool {
		c := 0
		for _, g := range s.byID[id] {
			if r, ok := decode(g.msg); ok && r.EndOfStream {
				c++
			}
		}
		return c >= n
	}
}

func (s *Session) hasReceipt(id string, n int) func() bool {
	return func() bool {
		c := 0
		for _, g := range s.byID[id] {
			if isReceipt(g.msg) {
				c++
			}
		}
		return c >= n
	}
}

func (s *Session) newID(what string) string {
	return fmt.Sprintf("%s-%s-%d", s.prefix, what, s.n.Add(1))
}

// words are a gateway's words for a call: its reply topic, plus w's.
func (s *Session) words(w wire.CallWords) wire.CallWords {
	if w.ReplyTo == "" {
		w.ReplyTo = s.replyTopic
	}
	return w
}

// send publishes a request for id with args, the words w and extra
// properties (which may override the id; "" removes it).
func (s *Session) send(ctx context.Context, id string, args map[string]any, w wire.CallWords, extra map[string]string) error {
	a, err := json.Marshal(args)
	if err != nil {
		return err
	}
	cfg := map[string]any{}
	if s.t.Tool != "" {
		cfg["toolgate-tool"] = s.t.Tool
	}
	c, _ := json.Marshal(cfg)
	props := map[string]string{wire.PropID: id}
	if call := wire.AppendCall(nil, w); len(call) > 0 {
		props[wire.PropCall] = string(call)
	}
	maps.Copy(props, extra)
	if props[wire.PropID] == "" {
		delete(props, wire.PropID)
	}
	return s.publish(ctx, wire.EncodeRequest(wire.Request{User: "wirecheck", Config: string(c), Arguments: string(a)}), props)
}

func (s *Session) publish(ctx context.Context, payload []byte, props map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.br.Publish(ctx, s.t.RequestTopic, transport.Message{Payload: payload, Properties: props}); err != nil {
		return fmt.Errorf("publish the request: %w", err)
	}
	return nil
}

// control publishes a credit word for id on the service's cancel topic.
func (s *Session) control(ctx context.Context, id, credit string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return s.br.Publish(ctx, wire.CancelTopic(s.t.RequestTopic), transport.Message{
		Payload: []byte(credit), Properties: map[string]string{wire.PropID: id, wire.PropCredit: credit}})
}

// quick makes a quick call and returns its messages once it ended.
func (s *Session) quick(ctx context.Context, what string, w wire.CallWords) (string, []got, error) {
	id := s.newID(what)
	if err := s.send(ctx, id, s.t.Quick, s.words(w), nil); err != nil {
		return id, nil, err
	}
	if !s.wait(ctx, 10*time.Second, s.hasFinal(id, 1)) {
		return id, s.of(id), fmt.Errorf("no reply carrying id %q within 10 s (%s)", id, s.strangers())
	}
	ms := s.of(id)
	if f := finals(ms); f[0].Error != nil {
		return id, ms, fmt.Errorf("the quick call failed: %s", describe(f[0].Error))
	}
	s.instance = ms[0].msg.Properties[wire.PropInstance]
	return id, ms, nil
}

// strangers tells what arrived with ids the session did not send.
func (s *Session) strangers() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var odd []string
	for _, id := range s.ids {
		if !strings.HasPrefix(id, s.prefix) {
			odd = append(odd, strconv.Quote(id))
		}
	}
	if len(odd) == 0 {
		return "nothing else arrived"
	}
	if len(odd) > 5 {
		odd = append(odd[:5], "…")
	}
	return fmt.Sprintf("%d messages with ids the caller did not send: %s", len(odd), strings.Join(odd, ", "))
}

// Run runs every check against s, in order, stopping at the first whose
// failure leaves the service unusable for the rest (none do today);
// report is told each outcome (err nil: passed; wrapping ErrSkipped:
// skipped).
func Run(ctx context.Context, s *Session, report func(c Check, err error)) {
	for _, c := range Checks() {
		report(c, c.Run(ctx, s))
	}
}

// Checks are the contract's rules, in the order Run runs them; the
// graceful stop is last.
func Checks() []Check {
	return []Check{
		{"ids-echoed", "every reply carries the request's id; a request without one is answered as \"unknown\"", checkIDs},
		{"end-of-stream", "a call's reply ends with exactly one message with end_of_stream, and nothing follows it", checkEnd},
		{"seq-numbered", "a call's reply messages are numbered toolgate-seq 0, 1, … in order, with no hole", checkSeq},
		{"reply-to", "replies go to the request's reply-to (in the response namespace) and only there; without one, or with one outside the namespace, to the response topic", checkReplyTo},
		{"instance-named", "every reply and receipt names the instance (toolgate-instance), the same for all of a call's", checkInstance},
		{"receipt", "a call asking for a receipt that is not answered within 250 ms gets an empty toolgate-receipt message first", checkReceipt},
		{"duplicate-running", "a request published again while its call runs gets a receipt and is not run again", checkDuplicateRunning},
		{"duplicate-ended", "a request published again after its call ended (or a resend on the cancel topic) gets the kept last reply again, not a new run", checkDuplicateEnded},
		{"cancel", "a cancel on the cancel topic ends a running call with \"cancelled\"; one that overtakes its request keeps it from running", checkCancel},
		{"deadline", "a request past its deadline is not run; a deadline that passes while the call runs answers \"timeout\"", checkDeadline},
		{"hostile-requests", "malformed and hostile requests are answered with an error or dropped, and the service keeps answering", checkHostile},
		{"announcement", "the instance is announced, keyed <id>@<instance>, with a lease, renewed before it runs out", checkAnnouncement},
		{"graceful-stop", "on a stop the instance is withdrawn and the call in flight is still answered", checkStop},
	}
}
