package pulsarbroker_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
)

// The real broker says when each consumer connected, and a consumer that
// connects again (here: closed and subscribed anew) gets another identity.
func TestAdminPresenceConnectionTimes(t *testing.T) {
	brokertest.RequirePulsar(t)
	b, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := "non-persistent://tg/request/" + brokertest.UniqueTopic("since")
	p := pulsarbroker.NewAdminPresence(brokertest.AdminURL(), nil)
	subscribe := func() (transport.Subscription, time.Time) {
		before := time.Now()
		sub, err := b.Subscribe(t.Context(), topic, "s", transport.Shared, func(transport.Message) {})
		if err != nil {
			t.Fatal(err)
		}
		return sub, before
	}
	first := func(before time.Time) transport.Consumer {
		t.Helper()
		cs, err := p.Consumers(t.Context(), topic)
		if err != nil || len(cs) != 1 {
			t.Fatalf("consumers: %v, %v; want one", cs, err)
		}
		// The broker's clock is this machine's; it writes milliseconds.
		if c := cs[0]; c.Since.Before(before.Add(-time.Second)) || c.Since.After(time.Now().Add(time.Second)) {
			t.Fatalf("consumer connected at %v (%q), want between %v and now", c.Since, c.ID, before)
		}
		return cs[0]
	}
	sub, before := subscribe()
	c1 := first(before)
	_ = sub.Close()
	// The broker writes milliseconds: subscribe again in a later one.
	eventually.True(t, time.Second, "a later millisecond", func() bool { return time.Now().Truncate(time.Millisecond).After(c1.Since) })
	sub, before = subscribe()
	defer sub.Close()
	c2 := first(before)
	if c1.ID == c2.ID || !c2.Since.After(c1.Since) {
		t.Fatalf("a consumer subscribed again: %+v then %+v; want another identity and a later time", c1, c2)
	}
}

// createPartitioned creates topic with n partitions through the admin API.
func createPartitioned(t *testing.T, topic string, n int) {
	t.Helper()
	scheme, rest, _ := strings.Cut(topic, "://")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, brokertest.AdminURL()+"/admin/v2/"+scheme+"/"+rest+"/partitions", strings.NewReader(strconv.Itoa(n)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("creating %s with %d partitions: %s", topic, n, resp.Status)
	}
}

// A partitioned topic's name has no stats of its own: its consumers and
// counters are its partitions' together (one consumer of a client per
// partition, under one name).
func TestAdminPresencePartitioned(t *testing.T) {
	brokertest.RequirePulsar(t)
	b, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := "non-persistent://tg/request/" + brokertest.UniqueTopic("parts")
	createPartitioned(t, topic, 8)
	p := pulsarbroker.NewAdminPresence(brokertest.AdminURL(), nil)
	if ok, err := p.Subscribed(t.Context(), topic); err != nil || ok {
		t.Fatalf("before any consumer: subscribed %v, %v", ok, err)
	}
	var got atomic.Int64
	sub, err := b.Subscribe(t.Context(), topic, "s", transport.Shared, func(transport.Message) { got.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	cs, err := p.Consumers(t.Context(), topic)
	if err != nil || len(cs) != 8 {
		t.Fatalf("consumers %v, %v; want one per partition", cs, err)
	}
	ids := map[string]bool{}
	for _, c := range cs {
		ids[c.ID] = true
		if c.Name != cs[0].Name || c.Since.IsZero() {
			t.Fatalf("consumers %+v: want one name, connection times known", cs)
		}
	}
	if len(ids) != 8 {
		t.Fatalf("consumer ids %v: want 8 different", ids)
	}
	if ok, err := p.Subscribed(t.Context(), topic); err != nil || !ok {
		t.Fatalf("with a consumer: subscribed %v, %v", ok, err)
	}
	const n = 64
	for i := range n {
		if err := b.Publish(t.Context(), topic, transport.Message{Key: strconv.Itoa(i), Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, 30*time.Second, "every message received", func() bool { return got.Load() == n })
	eventually.True(t, 30*time.Second, "the partitions' counters summed", func() bool {
		d, err := p.Delivery(t.Context(), topic, "s")
		return err == nil && d.In == n && d.Out == n
	})
	_ = sub.Close()
	eventually.True(t, 30*time.Second, "no consumer left", func() bool {
		cs, err := p.Consumers(t.Context(), topic)
		return err == nil && len(cs) == 0
	})
}
