package pulsarsrc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/registry"
)

func client(t *testing.T) pulsar.Client {
	t.Helper()
	brokertest.RequirePulsar(t)
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// responder plays TrustGraph's config-svc on topics of the test's own: it
// answers getvalues from its store, with its version, as the documented
// protocol says, and pushes a change notice after each change.
type responder struct {
	mu       sync.Mutex
	version  int64
	store    map[string]map[string]string // type → key → value
	requests []configRequest
	push     pulsar.Producer
}

func startResponder(t *testing.T, c pulsar.Client, reqTopic, respTopic, pushTopic string) *responder {
	t.Helper()
	r := &responder{store: map[string]map[string]string{"tool-service": {}, "tool": {}, "tool-set": {}}}
	resp, err := c.CreateProducer(pulsar.ProducerOptions{Topic: respTopic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(resp.Close)
	if r.push, err = c.CreateProducer(pulsar.ProducerOptions{Topic: pushTopic, DisableBatching: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.push.Close)
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: reqTopic, SubscriptionName: "config-svc", Type: pulsar.Shared})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cons.Close() })
	go func() {
		defer close(done)
		for {
			m, err := cons.Receive(ctx)
			if err != nil {
				return
			}
			var req configRequest
			_ = json.Unmarshal(m.Payload(), &req)
			r.mu.Lock()
			r.requests = append(r.requests, req)
			out := map[string]any{"version": r.version, "values": []any{}, "directory": []any{}, "config": map[string]any{}, "error": nil}
			switch {
			case req.Operation != "getvalues":
				out["version"] = 0
				out["error"] = map[string]any{"type": "bad-operation", "message": "Bad operation"}
			case req.Workspace == "":
				out["version"] = 0
				out["error"] = map[string]any{"type": "bad-request", "message": "Workspace is required"}
			default:
				var vals []any
				for k, v := range r.store[req.Type] {
					vals = append(vals, map[string]any{"type": req.Type, "key": k, "value": v, "workspace": ""})
				}
				out["values"] = vals
			}
			r.mu.Unlock()
			b, _ := json.Marshal(out)
			_, _ = resp.Send(ctx, &pulsar.ProducerMessage{Payload: b, Properties: map[string]string{"id": m.Properties()["id"]}})
		}
	}()
	return r
}

// put stores a value and pushes the change, as config-svc does.
func (r *responder) put(t *testing.T, typ, key, value string) {
	t.Helper()
	r.mu.Lock()
	if value == "" {
		delete(r.store[typ], key)
	} else {
		r.store[typ][key] = value
	}
	r.version++
	b, _ := json.Marshal(map[string]any{"version": r.version, "changes": map[string]any{typ: []string{"default"}}, "workspace_changes": nil})
	r.mu.Unlock()
	if _, err := r.push.Send(t.Context(), &pulsar.ProducerMessage{Payload: b}); err != nil {
		t.Fatal(err)
	}
}

// recorder is a Sink that merges like the gateway and records states.
type recorder struct {
	*registry.Merger
	mu     sync.Mutex
	states []string
}

func (r *recorder) State(o registry.Origin, synced bool, err error) {
	r.mu.Lock()
	r.states = append(r.states, fmt.Sprintf("%s synced=%v err=%v", o, synced, err))
	r.mu.Unlock()
	r.Merger.State(o, synced, err)
}

func TestConfigServiceSource(t *testing.T) {
	c := client(t)
	base := brokertest.UniqueTopic("config")
	req, resp, push := "non-persistent://tg/request/"+base, "non-persistent://tg/response/"+base, "non-persistent://tg/notify/"+base
	r := startResponder(t, c, req, resp, push)
	r.store["tool-service"]["svc"] = `{"id": "svc", "request-queue": "non-persistent://tg/request/svc", "response-queue": "non-persistent://tg/response/svc"}`
	r.store["tool"]["one"] = `{"type": "tool-service", "name": "one", "service": "svc"}`
	r.version = 7

	sink := &recorder{Merger: registry.NewMerger(nil, nil)}
	src := NewConfigService(c, ConfigOptions{RequestTopic: req, ResponseTopic: resp, PushTopic: push, RequestTimeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("source: %v", err)
		}
	}()

	reg := sink.Registry()
	eventually.True(t, 10*time.Second, "the first read", func() bool { _, ok := reg.Snapshot().Tool("one"); return ok })
	if tl, _ := reg.Snapshot().Tool("one"); tl.Origin != registry.OriginConfigService {
		t.Fatalf("origin %q", tl.Origin)
	}
	// A push: read again, the new tool is there.
	r.put(t, "tool", "two", `{"type": "tool-service", "name": "two", "service": "svc"}`)
	eventually.True(t, 2*time.Second, "tool two after its push", func() bool { _, ok := reg.Snapshot().Tool("two"); return ok })
	// A bad value is left out and reported; the rest stays.
	r.put(t, "tool", "bad", `{"type": "tool-service", "name": "bad", "service": "nowhere"}`)
	eventually.True(t, 2*time.Second, "the bad value reported", func() bool { return sink.Rejected(registry.OriginConfigService) > 0 })
	if _, ok := reg.Snapshot().Tool("bad"); ok {
		t.Fatal("an invalid descriptor is served")
	}
	if _, ok := reg.Snapshot().Tool("two"); !ok {
		t.Fatal("a bad value dropped the good ones")
	}
	// A tool set, read with the rest.
	r.put(t, "tool-set", "desk", `{"title": "Desk", "tools": ["two"]}`)
	eventually.True(t, 2*time.Second, "tool set desk after its push", func() bool {
		ts, ok := reg.Snapshot().Set("desk")
		return ok && ts.Title == "Desk" && len(ts.Tools()) == 1
	})
	// A delete.
	r.put(t, "tool", "one", "")
	eventually.True(t, 2*time.Second, "tool one gone after its delete", func() bool { _, ok := reg.Snapshot().Tool("one"); return !ok })
	// Every request named the workspace, on the system queue.
	r.mu.Lock()
	for _, q := range r.requests {
		if q.Operation != "getvalues" || q.Workspace != "default" || (q.Type != "tool" && q.Type != "tool-service" && q.Type != "tool-set") {
			t.Errorf("request %+v", q)
		}
	}
	r.mu.Unlock()
}

// Without a config service answering, the source reports the problem and
// keeps trying; nothing is served.
func TestConfigServiceUnreachable(t *testing.T) {
	c := client(t)
	base := brokertest.UniqueTopic("config-none")
	sink := &recorder{Merger: registry.NewMerger(nil, nil)}
	src := NewConfigService(c, ConfigOptions{RequestTopic: "non-persistent://tg/request/" + base,
		ResponseTopic: "non-persistent://tg/response/" + base, PushTopic: "non-persistent://tg/notify/" + base, RequestTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	eventually.True(t, 10*time.Second, "the problem reported", func() bool {
		for _, st := range sink.Status() {
			if st.Origin == registry.OriginConfigService && st.Error != "" && !st.Synced {
				return true
			}
		}
		return false
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A message without a key is rejected and counted; keyed ones apply.
func TestAnnouncementsWithoutKey(t *testing.T) {
	c := client(t)
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	doc := `{"tool-service": {"s": {"topic": "s"}}, "tool": {"t": {"type": "tool-service", "service": "s"}}}`
	for _, key := range []string{"", "s"} {
		if _, err := p.Send(t.Context(), &pulsar.ProducerMessage{Key: key, Payload: []byte(doc)}); err != nil {
			t.Fatal(err)
		}
	}
	m := registry.NewMerger(nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewAnnouncements(c, topic, nil).Run(ctx, m) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("source: %v", err)
		}
	}()
	if missing := func() []registry.Origin { m.Enable(registry.OriginAnnouncement); return m.WaitSynced(10 * time.Second) }(); len(missing) > 0 {
		t.Fatalf("not synced: %v", missing)
	}
	if _, ok := m.Registry().Snapshot().Tool("t"); !ok {
		t.Fatal("the keyed announcement is not served after the sync")
	}
	if got := m.Rejected(registry.OriginAnnouncement); got != 1 {
		t.Fatalf("rejected %d, want 1 (the message without a key)", got)
	}
}
