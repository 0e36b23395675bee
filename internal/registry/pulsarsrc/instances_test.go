package pulsarsrc

import (
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/wire"
)

// Instances of one service announce under keys of their own: the service
// is served while any is there; one withdrawing (with the SDK's tombstone,
// or a bare null value) leaves the others; a key that does not match its
// instance property is refused; a lease that is not a duration too.
func TestInstanceAnnouncements(t *testing.T) {
	c := client(t)
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := runAnnouncements(t, c, topic)
	id := brokertest.UniqueTopic("inst")
	send := func(msg *pulsar.ProducerMessage) {
		t.Helper()
		if _, err := p.Send(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
	}
	for _, inst := range []string{"a", "b", "c"} {
		send(&pulsar.ProducerMessage{Key: wire.AnnounceKey(id, inst), Payload: announcement(id),
			Properties: map[string]string{wire.PropInstance: inst, wire.PropLease: "1m"}})
	}
	eventually.True(t, 30*time.Second, "three instances", func() bool {
		st := m.Status()
		return len(st) == 1 && st[0].Instances == 3
	})
	// Refused: a key naming another instance, a lease that is no duration.
	send(&pulsar.ProducerMessage{Key: id + "@x", Payload: announcement(id), Properties: map[string]string{wire.PropInstance: "y"}})
	send(&pulsar.ProducerMessage{Key: id + "@z", Payload: announcement(id), Properties: map[string]string{wire.PropInstance: "z", wire.PropLease: "soon"}})
	eventually.True(t, 30*time.Second, "two refusals", func() bool { return m.Rejected(registry.OriginAnnouncement) == 2 })

	send(&pulsar.ProducerMessage{Key: wire.AnnounceKey(id, "a"), Properties: map[string]string{wire.PropWithdrawn: "true", wire.PropInstance: "a"}})
	send(&pulsar.ProducerMessage{Key: wire.AnnounceKey(id, "b")}) // a bare tombstone
	eventually.True(t, 30*time.Second, "one instance left", func() bool { return m.Status()[0].Instances == 1 })
	if _, ok := m.Registry().Snapshot().Tool(id + "-tool"); !ok {
		t.Fatal("the tool is not served with one instance left")
	}
	send(&pulsar.ProducerMessage{Key: wire.AnnounceKey(id, "c"), Properties: map[string]string{wire.PropWithdrawn: "true", wire.PropInstance: "c"}})
	waitTool(t, m, id+"-tool", false)
}
