package toolservice_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/registry/pulsarsrc"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
)

// What the SDK announces is what the gateway's registry accepts.
func TestAnnouncementPayloadIsARegistryUnit(t *testing.T) {
	if toolservice.DefaultAnnounceTopic != pulsarsrc.DefaultAnnounceTopic {
		t.Fatalf("the SDK announces on %s, gateways read %s", toolservice.DefaultAnnounceTopic, pulsarsrc.DefaultAnnounceTopic)
	}
	a := &toolservice.Announcement{
		ConfigParams: []toolservice.ConfigParam{{Name: "style", Required: true}},
		Tools: []toolservice.Tool{
			{Name: "tell-joke", Description: "a joke", Config: map[string]any{"style": "pun"},
				Arguments: []toolservice.Argument{{Name: "topic", Required: true}, {Name: "n", Type: "integer"}}},
			{Key: "k2", Name: "strict-joke", Strict: true, TaskSupport: "optional", Result: toolservice.ResultMCPContent, Config: map[string]any{"style": "dad-joke"}},
		},
	}
	b, err := toolservice.AnnouncementPayload("joke-service", "non-persistent://tg/request/joke", "non-persistent://tg/response/joke", a)
	if err != nil {
		t.Fatal(err)
	}
	m := registry.NewMerger(nil, nil)
	if err := m.Apply(registry.Update{Origin: registry.OriginAnnouncement, Unit: "joke-service", Doc: b}); err != nil {
		t.Fatalf("the registry rejects the SDK's announcement: %v\n%s", err, b)
	}
	snap := m.Registry().Snapshot()
	tl, ok := snap.Tool("tell-joke")
	if !ok || tl.ConfigJSON != `{"style":"pun"}` || len(tl.Arguments) != 2 || tl.Arguments[0].Type != "string" || !tl.Arguments[0].Required ||
		tl.Service.RequestTopic != "non-persistent://tg/request/joke" || tl.Origin != registry.OriginAnnouncement || tl.TaskSupport != registry.TaskForbidden || tl.Result != registry.ResultText {
		t.Fatalf("tell-joke = %+v", tl)
	}
	if st, ok := snap.Tool("strict-joke"); !ok || !st.Strict || st.Key != "k2" || st.TaskSupport != registry.TaskOptional || st.Result != registry.ResultMCPContent {
		t.Fatalf("strict-joke = %+v", st)
	}
	var doc map[string]map[string]any
	if err := json.Unmarshal(b, &doc); err != nil || len(doc["tool-service"]) != 1 || len(doc["tool"]) != 2 {
		t.Fatalf("payload %s", b)
	}
	// A tool without a name, or the same name twice, is refused before
	// anything is sent.
	for _, bad := range [][]toolservice.Tool{{{}}, {{Name: "x"}, {Name: "x"}}} {
		if _, err := toolservice.AnnouncementPayload("s", "a", "b", &toolservice.Announcement{Tools: bad}); err == nil {
			t.Errorf("tools %+v: no error", bad)
		}
	}
}

// Run announces once subscribed, Announce re-announces, and a graceful stop
// withdraws with a tombstone (an empty message with the instance's key):
// each as this instance of the service, with its lease.
func TestRunAnnouncesAndWithdraws(t *testing.T) {
	mem := transport.NewMem()
	defer mem.Close()
	got := make(chan transport.Message, 10)
	sub, err := mem.Subscribe(t.Context(), toolservice.DefaultAnnounceTopic, "watch", transport.Exclusive, func(m transport.Message) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	svc, err := toolservice.New(toolservice.Config{ID: "svc", Topic: "svc", Logger: slog.New(slog.DiscardHandler),
		Announce: &toolservice.Announcement{Tools: []toolservice.Tool{{Name: "one"}}, Lease: time.Hour}},
		func(context.Context, *toolservice.Request) (any, error) { return "ok", nil }, toolservice.WithPulsarClient(transporttest.PulsarClient(mem)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	next := func(what string) transport.Message {
		t.Helper()
		select {
		case m := <-got:
			if want := "svc@" + svc.Instance(); m.Key != want || m.Properties[wire.PropInstance] != svc.Instance() {
				t.Fatalf("%s: key %q, instance %q; want %q, %q", what, m.Key, m.Properties[wire.PropInstance], want, svc.Instance())
			}
			return m
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s", what)
		}
		return transport.Message{}
	}
	if m := next("announcement on start"); !strings.Contains(string(m.Payload), `"one"`) || m.Properties[wire.PropLease] != "1h0m0s" {
		t.Fatalf("announcement %s, lease %q", m.Payload, m.Properties[wire.PropLease])
	}
	if err := svc.Announce(t.Context(), &toolservice.Announcement{Tools: []toolservice.Tool{{Name: "two"}}}); err != nil {
		t.Fatal(err)
	}
	if m := next("re-announcement"); !strings.Contains(string(m.Payload), `"two"`) || strings.Contains(string(m.Payload), `"one"`) {
		t.Fatalf("re-announcement %s", m.Payload)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m := next("tombstone on stop"); len(m.Payload) != 0 {
		t.Fatalf("tombstone has a payload: %s", m.Payload)
	}
}

// The announcement is renewed every third of its lease, and no more once
// Run has ended.
func TestAnnouncementRenewed(t *testing.T) {
	mem := transport.NewMem()
	defer mem.Close()
	got := make(chan transport.Message, 100)
	sub, err := mem.Subscribe(t.Context(), toolservice.DefaultAnnounceTopic, "watch", transport.Exclusive, func(m transport.Message) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	svc, err := toolservice.New(toolservice.Config{ID: "svc", Topic: "svc", Logger: slog.New(slog.DiscardHandler),
		Announce: &toolservice.Announcement{Tools: []toolservice.Tool{{Name: "one"}}, Lease: 300 * time.Millisecond}},
		func(context.Context, *toolservice.Request) (any, error) { return "ok", nil }, toolservice.WithPulsarClient(transporttest.PulsarClient(mem)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var first []byte
	for i := range 4 { // the announcement, then three renewals
		select {
		case m := <-got:
			if i == 0 {
				first = m.Payload
			} else if !bytes.Equal(m.Payload, first) || m.Properties[wire.PropLease] != "300ms" {
				t.Fatalf("renewal %d: %s, lease %q", i, m.Payload, m.Properties[wire.PropLease])
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d announcements, want the first and three renewals", i)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Renewals, then the withdrawal.
	for {
		select {
		case m := <-got:
			if len(m.Payload) == 0 {
				if m.Properties[wire.PropWithdrawn] != "true" || m.Properties[wire.PropInstance] != svc.Instance() {
					t.Fatalf("withdrawal %v", m.Properties)
				}
				return
			}
			if !bytes.Equal(m.Payload, first) {
				t.Fatalf("after the renewals: %s", m.Payload)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no withdrawal")
		}
	}
}

// An announcement larger than a gateway reads is refused before it is
// sent, with the sizes in the error.
func TestAnnounceTooLarge(t *testing.T) {
	mem := transport.NewMem()
	defer mem.Close()
	got := make(chan transport.Message, 1)
	sub, err := mem.Subscribe(t.Context(), toolservice.DefaultAnnounceTopic, "watch", transport.Exclusive, func(m transport.Message) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	svc, err := toolservice.New(toolservice.Config{ID: "big", Topic: "big", Logger: slog.New(slog.DiscardHandler)},
		func(context.Context, *toolservice.Request) (any, error) { return "ok", nil }, toolservice.WithPulsarClient(transporttest.PulsarClient(mem)))
	if err != nil {
		t.Fatal(err)
	}
	if toolservice.MaxAnnouncementBytes != registry.DefaultMaxAnnouncementBytes {
		t.Fatalf("the SDK's bound %d is not the gateway's %d", toolservice.MaxAnnouncementBytes, registry.DefaultMaxAnnouncementBytes)
	}
	long := strings.Repeat("x", toolservice.MaxAnnouncementBytes)
	err = svc.Announce(t.Context(), &toolservice.Announcement{Tools: []toolservice.Tool{{Name: "one", Description: long}}})
	if err == nil || !strings.Contains(err.Error(), "over the 1048576") {
		t.Fatalf("announcing %d bytes: %v; want a refusal naming the bound", len(long), err)
	}
	select {
	case m := <-got:
		t.Fatalf("a refused announcement was published (%d bytes)", len(m.Payload))
	case <-time.After(100 * time.Millisecond):
	}
}
