package pulsarbroker_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
)

// TestSubscriptionSurvivesConsumerClosedByClient runs against the real
// broker. pulsar-client-go closes a consumer for good when its reconnect
// meets a non-retriable error (TopicNotFound, ConsumerBusy, …). Here the
// topic is unloaded and another consumer takes the exclusive subscription
// while ours reconnects (ConsumerBusy); once that one leaves, ours must be
// subscribed again and receive.
func TestSubscriptionSurvivesConsumerClosedByClient(t *testing.T) {
	brokertest.RequirePulsar(t)
	b, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL(), MaxReconnectBackoff: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := "persistent://tg/response/" + brokertest.UniqueTopic("resub")
	var got atomic.Int64
	sub, err := b.Subscribe(t.Context(), topic, "resub", transport.Exclusive, func(transport.Message) { got.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	other, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// Unload the topic: the broker disconnects our consumer, which
	// reconnects after its backoff; the other consumer gets in first.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut,
		brokertest.AdminURL()+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/unload", nil)
	var thief pulsar.Consumer
	eventually.Succeeds(t, 20*time.Second, "the other consumer takes the subscription", func() error {
		resp, err := http.DefaultClient.Do(req.Clone(t.Context()))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		thief, err = other.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "resub", Type: pulsar.Exclusive})
		return err
	})
	time.Sleep(2 * time.Second) //nolint:forbidigo // our consumer's reconnects (the client's own backoff, not observable) meet ConsumerBusy meanwhile
	thief.Close()

	p, err := other.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	eventually.True(t, 20*time.Second, "a message received after the other consumer left (the subscription made again)", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("{}")})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		return got.Load() > 0
	})
}
