package pulsarsrc

import (
	"flag"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/registry"
)

var (
	boundedFlood      = flag.Int("bounded-flood", 100, "announcements of -bounded-flood-bytes sent to a topic the broker bounds")
	boundedFloodBytes = flag.Int("bounded-flood-bytes", 5<<20-4096, "size of each announcement of that flood")
)

// announceMaxBytes is the maximum message size scripts/pulsar.sh sets on
// the announcements topic: an announcement's bound plus room for the
// message's metadata.
const announceMaxBytes = registry.DefaultMaxAnnouncementBytes + 64<<10

// setMaxMessageSize creates topic and sets its maximum message size (a
// topic policy) through the admin API.
func setMaxMessageSize(t *testing.T, topic string, n int) {
	t.Helper()
	url := brokertest.AdminURL() + "/admin/v2/" + strings.Replace(topic, "://", "/", 1)
	for _, r := range []struct{ method, url, body string }{{http.MethodPut, url, ""}, {http.MethodPost, url + "/maxMessageSize", strconv.Itoa(n)}} {
		req, err := http.NewRequest(r.method, r.url, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %s (topic-level policies must be on: scripts/pulsar/standalone.conf)", r.method, r.url, resp.Status)
		}
	}
}

// With the broker bounding the announcements topic's message size, as
// scripts/pulsar.sh does for tool-descriptors, a flood of announcements
// larger than a gateway reads (5 MB each by default) is refused by the
// broker: none of it reaches the topic, so a normal announcement sent in
// the middle of the flood is read as soon as it is sent, not after
// gigabytes of refused messages. Without the bound the gateway must read
// every byte ahead of it (TestAnnouncementFloodDoesNotHoldUpOthers).
func TestAnnouncementFloodRefusedByTheBroker(t *testing.T) {
	c := client(t)
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("ann-bounded")
	setMaxMessageSize(t, topic, announceMaxBytes)
	m := registry.NewMerger(nil, nil)
	m.Enable(registry.OriginAnnouncement)
	sink := &timingSink{Merger: m, seen: map[string]time.Time{}}
	runSource(t, c, topic, sink)

	huge := append(announcement("huge"), []byte(strings.Repeat(" ", *boundedFloodBytes-len(announcement("huge"))))...)
	// Each message of the flood on a producer of its own: after the
	// broker refuses a send, pulsar-client-go's producer waits for its
	// send timeout and is out of step, so one producer would send only
	// the first; several senders at once, as an attacker would.
	const senders = 8
	var sent, accepted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for s := range senders {
		wg.Go(func() {
			for i := s; i < *boundedFlood; i += senders {
				p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: time.Second})
				if err != nil {
					t.Errorf("flood producer: %v", err)
					return
				}
				if _, err := p.Send(t.Context(), &pulsar.ProducerMessage{Key: "huge" + strconv.Itoa(i), Payload: huge}); err == nil {
					accepted.Add(1)
				}
				sent.Add(1)
				p.Close()
			}
		})
	}
	// The normal announcement, from a producer of its own, once half the
	// flood was sent.
	eventually.Holds(5*time.Minute, func() bool { return sent.Load() >= int64(*boundedFlood/2) })
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(t.Context(), &pulsar.ProducerMessage{Key: "normal", Payload: announcement("normal")}); err != nil {
		t.Fatal(err)
	}
	sentAt := time.Now()
	appliedAt := waitTool(t, m, "normal-tool", true)
	t.Logf("normal announcement applied %v after the broker took it, %d of %d refused announcements of %d bytes sent by then",
		appliedAt.Sub(sentAt).Round(time.Millisecond), sent.Load(), *boundedFlood, len(huge))
	wg.Wait()
	t.Logf("flood of %d × %d bytes sent in %v", *boundedFlood, len(huge), time.Since(start).Round(time.Millisecond))
	if n := accepted.Load(); n > 0 {
		t.Errorf("the broker took %d announcements over the topic's maximum message size", n)
	}
	// Nothing of the flood reached the gateway's reader: only the normal
	// service is known, and nothing was refused by size on this side.
	if n := len(m.Registry().Snapshot().Services()); n != 1 {
		t.Errorf("%d services known, want only the normal one", n)
	}
	if n := m.Rejected(registry.OriginAnnouncement); n != 0 {
		t.Errorf("%d announcements reached the reader and were refused there; want none to reach it", n)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for unit := range sink.seen {
		if strings.HasPrefix(unit, "huge") {
			t.Errorf("an announcement of the flood was read: %s", unit)
		}
	}
}
