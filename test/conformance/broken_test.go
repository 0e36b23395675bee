package conformance

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/wirecheck"
	"github.com/toolgate/toolgate/wire"
)

// flaws are what a broken service gets wrong.
type flaws struct {
	otherIDs    bool // answers with ids of its own, not the request's
	noSeq       bool // numbers no reply message
	skipSeq     bool // numbers its messages 0, 2, 3, … (a hole)
	ignoreReply bool // answers on the response topic whatever reply-to says
	anyReplyTo  bool // answers on any reply-to, even outside the response namespace
	noInstance  bool // names no instance
	twoFinals   bool // ends a reply twice
	malformedOK bool // answers a malformed request with success
}

// brokenService is a tool service on the raw transport that honours
// receipts but runs every request it takes — duplicates, ones past their
// deadline, cancelled ones —, and has the flaws f. Its calls: {"mode": "stream"} answers 3 chunks then the last;
// {"mode": "sleep", "ms": N} answers after N ms; anything else "ok".
func brokenService(t *testing.T, br transport.Broker, topic string, f flaws) {
	t.Helper()
	req, resp := wire.RequestTopic(topic), wire.ResponseTopic(topic)
	n := 0
	handle := func(m transport.Message) {
		props := wire.ExpandCall(m.Properties)
		id := props[wire.PropID]
		if f.otherIDs {
			n++
			id = "broken-" + strconv.Itoa(n)
		}
		to := resp
		if rt := props[wire.PropReplyTo]; rt != "" && !f.ignoreReply && (f.anyReplyTo || wire.ReplyToAllowed(rt, resp)) {
			to = rt
		}
		seq := 0
		send := func(payload []byte, extra map[string]string) {
			p := map[string]string{wire.PropID: id}
			if !f.noInstance {
				p[wire.PropInstance] = "broken"
			}
			if payload != nil && !f.noSeq {
				p[wire.PropSeq] = strconv.Itoa(seq)
				seq++
				if f.skipSeq && seq == 1 {
					seq++
				}
			}
			for k, v := range extra {
				p[k] = v
			}
			_ = br.Publish(context.Background(), to, transport.Message{Payload: payload, Properties: p})
		}
		reply := func(text string, last bool) {
			send(wire.EncodeResponse(wire.Response{Response: text, EndOfStream: last}), nil)
		}
		r, err := wire.DecodeRequest(m.Payload)
		var args, cfg map[string]any
		if err == nil {
			err = json.Unmarshal([]byte(r.Arguments), &args)
		}
		if err == nil {
			err = json.Unmarshal([]byte(r.Config), &cfg)
		}
		if err != nil {
			if f.malformedOK {
				reply("ok", true)
			} else {
				send(wire.EncodeResponse(wire.Response{Error: &wire.Error{Type: "invalid-argument", Message: err.Error()}, EndOfStream: true}), nil)
			}
			return
		}
		if props[wire.PropReceipt] == "1" {
			send(nil, map[string]string{wire.PropReceipt: "1"})
		}
		switch args["mode"] {
		case "stream":
			for i := range 3 {
				reply(strconv.Itoa(i)+",", false)
			}
			reply("3", true)
		case "sleep":
			// The slow call: its answer is due ms later (the rules time
			// receipts and deadlines against it).
			ms, _ := args["ms"].(float64)
			time.AfterFunc(time.Duration(ms)*time.Millisecond, func() { reply("slept", true) })
			return
		default:
			reply("ok", true)
		}
		if f.twoFinals {
			reply("again", true)
		}
	}
	sub, err := br.Subscribe(t.Context(), req, topic+"-request", transport.Shared, handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
}

// TestSuiteCatchesBrokenServices runs rules against services with one flaw
// each: the rule that flaw breaks must fail; on the service without it,
// the same rule passes (so it is the flaw that fails it).
func TestSuiteCatchesBrokenServices(t *testing.T) {
	brokertest.RequirePulsar(t)
	t.Parallel()
	checks := map[string]wirecheck.Check{}
	for _, c := range wirecheck.Checks() {
		checks[c.Name] = c
	}
	for _, c := range []struct {
		name  string
		flaws flaws
		rule  string
	}{
		{"ids not echoed", flaws{otherIDs: true}, "ids-echoed"},
		{"chunks not numbered", flaws{noSeq: true}, "seq-numbered"},
		{"a hole in the numbers", flaws{skipSeq: true}, "seq-numbered"},
		{"reply-to ignored", flaws{ignoreReply: true}, "reply-to"},
		{"reply-to outside the namespace honoured", flaws{anyReplyTo: true}, "reply-to"},
		{"no instance named", flaws{noInstance: true}, "instance-named"},
		{"two ends", flaws{twoFinals: true}, "end-of-stream"},
		{"duplicates run twice", flaws{}, "duplicate-running"},
		{"malformed requests answered with success", flaws{malformedOK: true}, "hostile-requests"},
		{"cancels ignored", flaws{}, "cancel"},
		{"deadlines ignored", flaws{}, "deadline"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			br := broker(t)
			uniq := brokertest.UniqueTopic("wire-broken")
			brokenService(t, br, uniq, c.flaws)
			s, err := wirecheck.New(t.Context(), br, wirecheck.Target{RequestTopic: wire.RequestTopic(uniq), ResponseTopic: wire.ResponseTopic(uniq),
				Stream: map[string]any{"mode": "stream"}, Slow: map[string]any{"mode": "sleep", "ms": 1500}, SlowFor: 1500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			err = checks[c.rule].Run(t.Context(), s)
			if err == nil || wirecheck.Skipped(err) {
				t.Fatalf("%s: the rule %s reported %v; want a failure", c.name, c.rule, err)
			}
			t.Logf("%s: %s reports: %v", c.name, c.rule, err)
		})
	}
	// The rules that can pass on the raw service do, without its flaws.
	t.Run("without flaws", func(t *testing.T) {
		t.Parallel()
		br := broker(t)
		uniq := brokertest.UniqueTopic("wire-sound")
		brokenService(t, br, uniq, flaws{})
		s, err := wirecheck.New(t.Context(), br, wirecheck.Target{RequestTopic: wire.RequestTopic(uniq), ResponseTopic: wire.ResponseTopic(uniq),
			Stream: map[string]any{"mode": "stream"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		for _, rule := range []string{"end-of-stream", "seq-numbered", "reply-to", "instance-named", "hostile-requests"} {
			if err := checks[rule].Run(t.Context(), s); err != nil {
				t.Errorf("%s on a service without the flaw: %v", rule, err)
			}
		}
	})
}

// TestTrustGraphUnconverted: TrustGraph's own joke service (the console
// script of trustgraph-flow, unconverted) keeps TrustGraph's contract and
// not toolgate's; the rules of toolgate's own words report it, those of
// TrustGraph's contract pass.
func TestTrustGraphUnconverted(t *testing.T) {
	brokertest.RequirePulsar(t)
	t.Parallel()
	uniq := brokertest.UniqueTopic("wire-tg")
	startProcess(t, "joke-service", uniq, filepath.Join(venv(t), "bin", "joke-service"),
		"-p", brokertest.PulsarURL(), "--id", uniq, "-t", uniq, "--no-metrics", "--no-loki-enabled")
	br := broker(t)
	s, err := wirecheck.New(t.Context(), br, wirecheck.Target{RequestTopic: wire.RequestTopic(uniq), ResponseTopic: wire.ResponseTopic(uniq),
		Quick: map[string]any{"topic": "food"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	fails := map[string]bool{"seq-numbered": true, "reply-to": true, "instance-named": true, "deadline": true}
	for _, c := range wirecheck.Checks() {
		if c.Name == "duplicate-ended" { // a new random joke, or by chance the same one
			continue
		}
		err := c.Run(t.Context(), s)
		switch {
		case wirecheck.Skipped(err):
		case fails[c.Name] && err == nil:
			t.Errorf("%s passed on TrustGraph's unconverted service", c.Name)
		case !fails[c.Name] && err != nil:
			t.Errorf("%s failed on TrustGraph's unconverted service: %v", c.Name, err)
		}
	}
}
