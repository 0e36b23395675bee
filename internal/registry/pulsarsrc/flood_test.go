package pulsarsrc

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
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
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
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

// TestNewIDFloodKeepsRenewals: a Go SDK service announces with a lease of
// 1.5 s (renewed every 0.5 s) while 2,000 announcements of new service ids
// arrive at once. Its tool is served throughout — its renewals are applied
// as they are read, never behind the new ids — and what the source takes
// of the flood is bounded by its Admission: the rest is refused, counted
// as throttled.
func TestNewIDFloodKeepsRenewals(t *testing.T) {
	c := client(t)
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	adm := Admission{PerSecond: 100, Burst: 50, Waiting: 200}
	m := registry.NewMerger(nil, nil)
	m.Enable(registry.OriginAnnouncement)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewAnnouncements(c, topic, nil, WithAdmission(adm)).Run(ctx, m) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("source: %v", err)
		}
	})
	if missing := m.WaitSynced(20 * time.Second); len(missing) > 0 {
		t.Fatalf("not synced: %v", missing)
	}

	id := brokertest.UniqueTopic("live")
	svc, err := toolservice.New(toolservice.Config{ID: id, Topic: id, PulsarURL: brokertest.PulsarURL(),
		Logger:   slog.New(slog.DiscardHandler),
		Announce: &toolservice.Announcement{Topic: topic, Lease: 1500 * time.Millisecond, Tools: []toolservice.Tool{{Name: id + "-tool"}}}},
		func(context.Context, *toolservice.Request) (any, error) { return "ok", nil })
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RunService(t, id, svc, 30*time.Second)
	waitTool(t, m, id+"-tool", true)
	renewals := countAnnouncements(t, c, topic, id+"@")

	// From now to the end: the live service's tool served at every look.
	var looks, missed atomic.Int64
	wctx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			looks.Add(1)
			if _, ok := m.Registry().Snapshot().Tool(id + "-tool"); !ok {
				missed.Add(1)
			}
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer func() { stopWatch(); wg.Wait() }()
	served := func(when string) {
		t.Helper()
		if n := missed.Load(); n > 0 {
			t.Fatalf("%s: the live service's tool missing at %d of %d looks", when, n, looks.Load())
		}
	}

	const n = 2000
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: n, BatchingMaxPublishDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	renewed := renewals.Load()
	for i := range n {
		unit := fmt.Sprintf("%s-flood%d", id, i)
		p.SendAsync(t.Context(), &pulsar.ProducerMessage{Key: wire.AnnounceKey(unit, "x"), Payload: announcement(unit),
			Properties: map[string]string{wire.PropInstance: "x", wire.PropLease: "1m"}}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
			}
		})
	}
	if err := p.FlushWithCtx(t.Context()); err != nil {
		t.Fatal(err)
	}
	var st registry.SourceStatus
	eventually.True(t, 2*time.Minute, "the flood admitted or refused", func() bool {
		served("during the flood")
		st = m.Status()[0]
		return st.Units-1+int(st.Rejected) >= n
	})
	t.Logf("%d announcements of new ids admitted or refused %v after the first was sent: %+v", n, time.Since(start).Round(time.Millisecond), st)
	if st.Throttled == 0 || st.Throttled != st.Rejected {
		t.Errorf("refusals %d, of them throttled %d; want every refusal throttled, and some", st.Rejected, st.Throttled)
	}
	if admitted, most := st.Units-1, adm.Burst+int(time.Since(start).Seconds()+1)*adm.PerSecond; admitted > most {
		t.Errorf("%d new services admitted, more than the admission allows (%d)", admitted, most)
	}
	// Served through three leases' renewals (nine) since the flood began.
	eventually.True(t, time.Minute, "nine renewals since the flood began", func() bool {
		served("after the flood")
		return renewals.Load()-renewed >= 9
	})
	served("at the end")
	t.Logf("the live service's tool served at each of %d looks over %v", looks.Load(), time.Since(start).Round(time.Millisecond))
}

// countAnnouncements counts the announcements (not withdrawals) whose key
// starts with prefix read on topic from now on.
func countAnnouncements(t *testing.T, c pulsar.Client, topic, prefix string) *atomic.Int64 {
	t.Helper()
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.LatestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			msg, err := r.Next(ctx)
			if err != nil {
				return
			}
			if strings.HasPrefix(msg.Key(), prefix) && len(msg.Payload()) > 0 {
				n.Add(1)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; r.Close() })
	return &n
}
