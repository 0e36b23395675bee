package pulsarbroker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
)

// TestIdleProducersCloseAndReopen runs against the real broker: a producer
// unused for ProducerIdleTimeout is closed, and the next publish opens a new
// one that delivers.
func TestIdleProducersCloseAndReopen(t *testing.T) {
	brokertest.RequirePulsar(t)
	b, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL(), ProducerIdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := "non-persistent://tg/request/" + brokertest.UniqueTopic("idle")
	var got atomic.Int64
	sub, err := b.Subscribe(t.Context(), topic, "idle-test", transport.Exclusive, func(transport.Message) { got.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	publish := func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := b.Publish(ctx, topic, transport.Message{Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	publish()
	if b.Producers() != 1 {
		t.Fatalf("%d producers after a publish, want 1", b.Producers())
	}
	eventually.True(t, 5*time.Second, "the idle producer closed", func() bool { return b.Producers() == 0 })
	publish()
	eventually.True(t, 5*time.Second, "2 messages delivered", func() bool { return got.Load() >= 2 })
}

// TestPublishInline runs against the real broker: with nothing else being
// sent, PublishInline hands the message over on the calling goroutine and
// reports its outcome before it returns; under concurrent inline and
// queued publishing every message arrives once and every outcome is
// reported once.
func TestPublishInline(t *testing.T) {
	brokertest.RequirePulsar(t)
	b, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Persistent: on a non-persistent topic the broker may drop messages
	// a consumer has no permits for yet, which is not what this counts.
	topic := "persistent://tg/request/" + brokertest.UniqueTopic("inline")
	var mu sync.Mutex
	seen := map[string]int{}
	sub, err := b.Subscribe(t.Context(), topic, "inline-test", transport.Exclusive, func(m transport.Message) {
		mu.Lock()
		seen[string(m.Payload)]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	var reported atomic.Bool
	if err := b.PublishInline(ctx, topic, transport.Message{Payload: []byte(`"first"`)}, func(err error) {
		if err != nil {
			t.Errorf("first message: %v", err)
		}
		reported.Store(true)
	}); err != nil {
		t.Fatal(err)
	}
	if !reported.Load() {
		t.Fatal("PublishInline returned before the outcome was reported, with nothing else being sent")
	}

	const workers, each = 16, 100
	var outcomes, failures atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				payload := []byte(fmt.Sprintf(`"%d-%d"`, w, i))
				publish := b.PublishAsync
				if (w+i)%2 == 0 {
					publish = b.PublishInline
				}
				if err := publish(ctx, topic, transport.Message{Payload: payload}, func(err error) {
					outcomes.Add(1)
					if err != nil {
						failures.Add(1)
					}
				}); err != nil {
					t.Errorf("publish %s: %v", payload, err)
					return
				}
			}
		})
	}
	wg.Wait()
	want := workers*each + 1
	eventually.Succeeds(t, 30*time.Second, "every message arrived and every outcome reported", func() error {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n != want || outcomes.Load() != workers*each {
			return fmt.Errorf("%d of %d messages arrived, %d of %d outcomes reported", n, want, outcomes.Load(), workers*each)
		}
		return nil
	})
	if failures.Load() != 0 {
		t.Errorf("%d publishes reported a failure", failures.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for p, n := range seen {
		if n != 1 {
			t.Errorf("message %s arrived %d times", p, n)
		}
	}
}

// A message whose deadline has passed before it is handed to the client
// is given up, inline and queued: its outcome is DeadlineExceeded and the
// topic never sees it; one with time left is sent.
func TestPublishDeadline(t *testing.T) {
	brokertest.RequirePulsar(t)
	b, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := "non-persistent://tg/request/" + brokertest.UniqueTopic("deadline")
	got := make(chan string, 8)
	sub, err := b.Subscribe(t.Context(), topic, "deadline-test", transport.Exclusive, func(m transport.Message) { got <- string(m.Payload) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		name     string
		publish  func(context.Context, string, transport.Message, func(error)) error
		deadline time.Time
		want     error
	}{
		{"inline, expired", b.PublishInline, time.Now().Add(-time.Millisecond), context.DeadlineExceeded},
		{"queued, expired", b.PublishAsync, time.Now().Add(-time.Millisecond), context.DeadlineExceeded},
		{"inline, in time", b.PublishInline, time.Now().Add(20 * time.Second), nil},
	} {
		outcome := make(chan error, 1)
		if err := c.publish(ctx, topic, transport.Message{Payload: []byte(c.name), Deadline: c.deadline}, func(err error) { outcome <- err }); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		select {
		case err := <-outcome:
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Errorf("%s: outcome %v, want %v", c.name, err, c.want)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no outcome", c.name)
		}
	}
	select {
	case p := <-got:
		if p != "inline, in time" {
			t.Errorf("the topic got %q, a message given up", p)
		}
	case <-ctx.Done():
		t.Fatal("the message in time never arrived")
	}
}

// TestConnection: every client made from one Connection connects alike,
// the gateway's broker and the registry's readers.
func TestConnection(t *testing.T) {
	t.Parallel()
	if o := pulsarbroker.ConnectionOptions(transport.Connection{URL: "pulsar://h:6650"}); o.URL != "pulsar://h:6650" || o.Authentication != nil || o.TLSTrustCertsFilePath != "" {
		t.Errorf("without a token or CA: %+v", o)
	}
	o := pulsarbroker.ConnectionOptions(transport.Connection{URL: "pulsar+ssl://h:6651", TokenFile: "/run/token", TLSTrustCertsFile: "/run/ca.pem"})
	if o.URL != "pulsar+ssl://h:6651" || o.Authentication == nil || o.TLSTrustCertsFilePath != "/run/ca.pem" {
		t.Errorf("with a token and CA: %+v", o)
	}
	if _, err := pulsarbroker.NewClient(pulsarbroker.Options{}); err == nil {
		t.Error("NewClient without a URL succeeded")
	}
}

// A Transient subscription on a persistent topic gets what is sent while
// it listens, and the broker forgets it once its consumer is closed: no
// subscription, hence no backlog, is left behind.
func TestTransientSubscriptionLeavesNothing(t *testing.T) {
	brokertest.RequirePulsar(t)
	b, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := "persistent://tg/response/" + brokertest.UniqueTopic("transient")
	subscriptions := func() map[string]json.RawMessage {
		resp, err := http.Get(brokertest.AdminURL() + "/admin/v2/persistent/" + strings.TrimPrefix(topic, "persistent://") + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st struct {
			Subscriptions map[string]json.RawMessage `json:"subscriptions"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st.Subscriptions
	}
	got := make(chan string, 10)
	sub, err := b.Subscribe(t.Context(), topic, "listener", transport.Transient, func(m transport.Message) { got <- string(m.Payload) })
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b", "c"} {
		if err := b.Publish(t.Context(), topic, transport.Message{Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"a", "b", "c"} {
		select {
		case p := <-got:
			if p != want {
				t.Fatalf("got %q, want %q", p, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no message %q within 10 s", want)
		}
	}
	if s := subscriptions(); len(s) != 1 {
		t.Fatalf("while listening: subscriptions %v, want the one", s)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "no subscription left once the consumer is closed", func() bool { return len(subscriptions()) == 0 })
}
