package transport_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/transport"
)

// TestIdleProducersCloseAndReopen runs against the real broker: a producer
// unused for ProducerIdleTimeout is closed, and the next publish opens a new
// one that delivers.
func TestIdleProducersCloseAndReopen(t *testing.T) {
	testenv.RequirePulsar(t)
	b, err := transport.NewPulsar(transport.PulsarOptions{URL: testenv.PulsarURL(), ProducerIdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	topic := "non-persistent://tg/request/" + testenv.UniqueTopic("idle")
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
	deadline := time.Now().Add(5 * time.Second)
	for b.Producers() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle producer was not closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	publish()
	deadline = time.Now().Add(5 * time.Second)
	for got.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 messages delivered", got.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
