package bridge_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/wire"
)

// A service that does not number its replies (as TrustGraph's Python
// services) answers in three messages; between its calls the gateway's
// subscription to its response topic is released (the service withdrew)
// and made again (it announced itself again), while the topic lives on
// and takes other messages. The broker's counters of a subscription made
// again start afresh: compared with those of the one before, they would
// read as messages dropped. Every first call after a new subscription
// must end whole.
func TestUnnumberedRepliesAfterTheSubscriptionIsMadeAgain(t *testing.T) {
	brokertest.RequirePulsar(t)
	gw, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL(), ReceiverQueueSize: 10000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	svc, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	topic := brokertest.UniqueTopic("resub")
	target := bridge.Target{RequestTopic: wire.RequestTopic(topic), ResponseTopic: wire.ResponseTopic(topic)}
	answer := func(id string, text string, last bool) {
		if err := svc.Publish(context.Background(), target.ResponseTopic, transport.Message{
			Payload: wire.EncodeResponse(wire.Response{Response: text, EndOfStream: last}), Properties: map[string]string{wire.PropID: id},
		}); err != nil {
			t.Errorf("reply: %v", err)
		}
	}
	sub, err := svc.Subscribe(t.Context(), target.RequestTopic, topic+"-request", transport.Shared, func(m transport.Message) {
		id := m.Properties[wire.PropID]
		answer(id, "a,", false)
		answer(id, "b,", false)
		answer(id, "c", true)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	// Another gateway's subscription keeps the topic's messages flowing
	// while this one's is away, as replicas do.
	other, err := svc.Subscribe(t.Context(), target.ResponseTopic, "other-gateway", transport.Exclusive, func(transport.Message) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })

	// The admin API's client keeps its connections idle in the default
	// transport: closed once the bridge's watch has stopped.
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	admin := pulsarbroker.NewAdminPresence(brokertest.AdminURL(), nil)
	b := bridge.New(gw, bridge.Options{Watch: admin, Logger: testLogger(t)})
	t.Cleanup(b.Close)
	ours := func() int {
		cs, err := admin.Consumers(t.Context(), target.ResponseTopic)
		if err != nil {
			return -1
		}
		n := 0
		for _, c := range cs {
			if strings.HasPrefix(c.Name, b.Subscription()+"/") {
				n++
			}
		}
		return n
	}
	for round := range 10 {
		b.Track([]string{target.ResponseTopic})
		eventually.True(t, 20*time.Second, "the response topic subscribed", func() bool { return ours() == 1 })
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		c, err := b.Call(ctx, target, wire.Request{Arguments: "{}"}, bridge.CallOptions{})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		out, err := c.Wait(ctx)
		c.Close()
		cancel()
		if err != nil || out != "a,b,c" {
			t.Fatalf("round %d: the first call on a subscription made again: %q, %v; want a,b,c whole", round, out, err)
		}
		// The service withdraws: the subscription is released; the topic
		// takes messages meanwhile.
		b.Track(nil)
		eventually.True(t, 20*time.Second, "the response subscription released", func() bool { return ours() == 0 })
		for range 5 {
			answer("someone-else", "x", true)
		}
	}
}
