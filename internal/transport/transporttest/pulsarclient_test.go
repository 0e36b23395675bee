package transporttest_test

import (
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
)

// TestPulsarClient: the Pulsar transport over PulsarClient delivers what
// it publishes to the in-memory broker's subscribers (payload, properties
// and key), and delivers what is published there to its own.
func TestPulsarClient(t *testing.T) {
	t.Parallel()
	mem := transport.NewMem()
	t.Cleanup(mem.Close)
	p, err := pulsarbroker.New(pulsarbroker.Options{Client: transporttest.PulsarClient(mem)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)

	got := make(chan transport.Message, 1)
	sub, err := p.Subscribe(t.Context(), "non-persistent://tg/response/x", "s", transport.Exclusive, func(m transport.Message) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	if n := mem.Subscribers("non-persistent://tg/response/x"); n != 1 {
		t.Fatalf("%d subscribers on the in-memory broker, want 1", n)
	}
	if err := mem.Publish(t.Context(), "non-persistent://tg/response/x", transport.Message{Payload: []byte("a"), Properties: map[string]string{"id": "1"}, Key: "k"}); err != nil {
		t.Fatal(err)
	}
	expect(t, got, "a", "1", "") // subscribers get no key from the Pulsar transport

	memGot := make(chan transport.Message, 1)
	msub, err := mem.Subscribe(t.Context(), "non-persistent://tg/request/x", "s", transport.Exclusive, func(m transport.Message) { memGot <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer msub.Close()
	if err := p.Publish(t.Context(), "non-persistent://tg/request/x", transport.Message{Payload: []byte("b"), Properties: map[string]string{"id": "2"}, Key: "j"}); err != nil {
		t.Fatal(err)
	}
	expect(t, memGot, "b", "2", "j")

	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if n := mem.Subscribers("non-persistent://tg/response/x"); n != 0 {
		t.Fatalf("%d subscribers after Close, want 0", n)
	}
}

func expect(t *testing.T, ch <-chan transport.Message, payload, id, key string) {
	t.Helper()
	select {
	case m := <-ch:
		if string(m.Payload) != payload || m.Properties["id"] != id || m.Key != key {
			t.Fatalf("got %q %v key %q, want %q id=%s key %q", m.Payload, m.Properties, m.Key, payload, id, key)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%q not delivered", payload)
	}
}
