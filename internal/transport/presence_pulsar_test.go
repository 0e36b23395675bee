package transport_test

import (
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/transport"
)

// The real broker says when each consumer connected, and a consumer that
// connects again (here: closed and subscribed anew) gets another identity.
func TestAdminPresenceConnectionTimes(t *testing.T) {
	brokertest.RequirePulsar(t)
	b, err := transport.NewPulsar(transport.PulsarOptions{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := "non-persistent://tg/request/" + brokertest.UniqueTopic("since")
	p := transport.NewAdminPresence(brokertest.AdminURL(), nil)
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
	time.Sleep(10 * time.Millisecond)
	sub, before = subscribe()
	defer sub.Close()
	c2 := first(before)
	if c1.ID == c2.ID || !c2.Since.After(c1.Since) {
		t.Fatalf("a consumer subscribed again: %+v then %+v; want another identity and a later time", c1, c2)
	}
}
