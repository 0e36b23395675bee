package pulsarbroker_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
)

// Closing a subscription to a non-persistent topic handles what the broker
// had sent it: nothing would send those messages again (a request on its
// way to a service replica that stops is served, not lost).
func TestCloseHandlesWhatArrived(t *testing.T) {
	brokertest.RequirePulsar(t)
	b, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := "non-persistent://tg/request/" + brokertest.UniqueTopic("close")
	release := make(chan struct{})
	var handled atomic.Int64
	sub, err := b.Subscribe(t.Context(), topic, "s", transport.Shared, func(transport.Message) {
		<-release // the first holds the loop: the others wait in the client
		handled.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		if err := b.Publish(t.Context(), topic, transport.Message{Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	p := pulsarbroker.NewAdminPresence(brokertest.AdminURL(), nil)
	eventually.True(t, 30*time.Second, "every message sent to the consumer", func() bool {
		d, err := p.Delivery(t.Context(), topic, "s")
		return err == nil && d.Out == n
	})
	closed := make(chan struct{})
	go func() { _ = sub.Close(); close(closed) }()
	close(release)
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	if got := handled.Load(); got != n {
		t.Fatalf("%d of %d messages the consumer had received were handled", got, n)
	}
}
