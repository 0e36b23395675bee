package pulsarsrc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/registry"
)

func announcement(id string) []byte {
	return fmt.Appendf(nil, `{"tool-service": {%q: {"topic": %q}}, "tool": {%q: {"type": "tool-service", "service": %q}}}`,
		id, id, id+"-tool", id)
}

// runAnnouncements reads topic into a new merger until the test ends and
// waits for its first sync.
func runAnnouncements(t *testing.T, c pulsar.Client, topic string, opts ...registry.MergerOption) *registry.Merger {
	t.Helper()
	m := registry.NewMerger(nil, nil, opts...)
	m.Enable(registry.OriginAnnouncement)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewAnnouncements(c, topic, nil).Run(ctx, m) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("source: %v", err)
		}
	})
	if missing := m.WaitSynced(20 * time.Second); len(missing) > 0 {
		t.Fatalf("not synced: %v", missing)
	}
	return m
}

func waitTool(t *testing.T, m *registry.Merger, name string, present bool) time.Time {
	t.Helper()
	eventually.True(t, 30*time.Second, fmt.Sprintf("tool %s present=%v", name, present), func() bool {
		_, ok := m.Registry().Snapshot().Tool(name)
		return ok == present
	})
	return time.Now()
}

// A null-value message (Pulsar's tombstone, what other clients send to
// delete a key of a compacted topic) withdraws the service it is keyed by.
func TestAnnouncementTombstoneWithdraws(t *testing.T) {
	c := client(t)
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := runAnnouncements(t, c, topic)
	if _, err := p.Send(t.Context(), &pulsar.ProducerMessage{Key: "tomb", Payload: announcement("tomb")}); err != nil {
		t.Fatal(err)
	}
	waitTool(t, m, "tomb-tool", true)
	t0 := time.Now()
	if _, err := p.Send(t.Context(), &pulsar.ProducerMessage{Key: "tomb"}); err != nil { // no payload: a null value
		t.Fatal(err)
	}
	t.Logf("withdrawn %v after the tombstone was sent", waitTool(t, m, "tomb-tool", false).Sub(t0))
}

// Announcements over the size limit are refused unread and counted; one
// beyond the number of services allowed is refused too; the rest apply.
func TestAnnouncementBounds(t *testing.T) {
	c := client(t)
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := runAnnouncements(t, c, topic, registry.WithMaxAnnouncedServices(2))
	huge := append(announcement("huge"), []byte(strings.Repeat(" ", registry.DefaultMaxAnnouncementBytes))...)
	for _, msg := range []*pulsar.ProducerMessage{
		{Key: "huge", Payload: huge},
		{Key: "a", Payload: announcement("a")},
		{Key: "b", Payload: announcement("b")},
		{Key: "c", Payload: announcement("c")}, // the third: one too many
	} {
		if _, err := p.Send(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
	}
	waitTool(t, m, "b-tool", true)
	eventually.Holds(10*time.Second, func() bool { return m.Rejected(registry.OriginAnnouncement) >= 2 })
	snap := m.Registry().Snapshot()
	for name, want := range map[string]bool{"huge-tool": false, "a-tool": true, "b-tool": true, "c-tool": false} {
		if _, ok := snap.Tool(name); ok != want {
			t.Errorf("%s served: %v, want %v", name, ok, want)
		}
	}
	if got := m.Rejected(registry.OriginAnnouncement); got != 2 {
		t.Errorf("rejected %d, want 2", got)
	}
	// Room again once one withdraws.
	if _, err := p.Send(t.Context(), &pulsar.ProducerMessage{Key: "a"}); err != nil {
		t.Fatal(err)
	}
	waitTool(t, m, "a-tool", false)
	if _, err := p.Send(t.Context(), &pulsar.ProducerMessage{Key: "c", Payload: announcement("c")}); err != nil {
		t.Fatal(err)
	}
	waitTool(t, m, "c-tool", true)
}

// The flood of TestAnnouncementFloodDoesNotHoldUpOthers; larger ones are
// measured with, for example, -args -flood-big=0 -flood-over=1000.
var (
	floodBig       = flag.Int("flood-big", 20, "valid announcements of about 900 KB in the flood")
	floodOver      = flag.Int("flood-over", 10, "announcements over the size limit in the flood")
	floodOverBytes = flag.Int("flood-over-bytes", 4<<20, "size of each announcement over the limit")
)

// timingSink records when each unit was applied.
type timingSink struct {
	*registry.Merger
	mu   sync.Mutex
	seen map[string]time.Time
}

// runSource reads topic into sink until the test ends and waits for its
// first sync.
func runSource(t *testing.T, c pulsar.Client, topic string, sink *timingSink) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewAnnouncements(c, topic, nil).Run(ctx, sink) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("source: %v", err)
		}
	})
	if missing := sink.WaitSynced(20 * time.Second); len(missing) > 0 {
		t.Fatalf("not synced: %v", missing)
	}
}

func (s *timingSink) Apply(u registry.Update) error {
	err := s.Merger.Apply(u)
	s.mu.Lock()
	s.seen[u.Unit] = time.Now()
	s.mu.Unlock()
	return err
}

func (s *timingSink) ApplyBatch(us []registry.Update) []error {
	errs := s.Merger.ApplyBatch(us)
	s.mu.Lock()
	for _, u := range us {
		s.seen[u.Unit] = time.Now()
	}
	s.mu.Unlock()
	return errs
}

// A flood of large announcements, some over the limit and some under it,
// does not hold up a normal one sent in the middle of it: the normal one
// is applied while the large ones are still being parsed, and every large
// one is accounted for (applied or refused). The delay is logged, not
// asserted: the test fails when the normal one waits for the whole flood.
func TestAnnouncementFloodDoesNotHoldUpOthers(t *testing.T) {
	c := client(t)
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: time.Minute,
		MaxPendingMessages: 8}) // a flood of large messages at the pace the broker takes them
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := registry.NewMerger(nil, nil)
	m.Enable(registry.OriginAnnouncement)
	sink := &timingSink{Merger: m, seen: map[string]time.Time{}}
	runSource(t, c, topic, sink)
	// Large but valid: a service with many tools (about 900 KB of YAML).
	big := func(id string) []byte {
		var sb strings.Builder
		fmt.Fprintf(&sb, "tool-service:\n  %s: {topic: %s}\ntool:\n", id, id)
		for i := 0; sb.Len() < 900<<10; i++ {
			fmt.Fprintf(&sb, "  %s-t%d: {type: tool-service, service: %s, description: tool number %d of a large announcement%s}\n", id, i, id, i, strings.Repeat(" with words", 20))
		}
		return []byte(sb.String())
	}
	floodN, overN := *floodBig, *floodOver
	over := append(announcement("over"), []byte(strings.Repeat(" ", *floodOverBytes-len(announcement("over"))))...)
	mid := (floodN + overN) / 2 // the normal one is sent after this one
	var sendErr error
	var wg sync.WaitGroup
	var normalSent time.Time // written before wg.Done, read after wg.Wait
	for i := range floodN + overN {
		key, payload := fmt.Sprintf("big%d", i), big(fmt.Sprintf("big%d", i))
		if i >= floodN {
			key, payload = fmt.Sprintf("over%d", i), over
		}
		wg.Add(1)
		p.SendAsync(t.Context(), &pulsar.ProducerMessage{Key: key, Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				sendErr = err
			}
			wg.Done()
		})
		if i == mid {
			wg.Add(1)
			p.SendAsync(t.Context(), &pulsar.ProducerMessage{Key: "normal", Payload: announcement("normal")}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					sendErr = err
				}
				normalSent = time.Now() // the broker has it
				wg.Done()
			})
		}
	}
	wg.Wait()
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	normalAt := waitTool(t, m, "normal-tool", true)
	sink.mu.Lock()
	appliedBig := 0
	ahead := min(mid+1, floodN) // valid large ones sent before it
	for i := range ahead {
		if _, ok := sink.seen[fmt.Sprintf("big%d", i)]; ok {
			appliedBig++
		}
	}
	sink.mu.Unlock()
	t.Logf("normal announcement applied %v after the broker took it; %d of the %d valid large ones sent before it applied by then, %d too large ones before it",
		normalAt.Sub(normalSent), appliedBig, ahead, mid+1-ahead)
	if ahead > 1 && appliedBig == ahead {
		t.Errorf("the normal announcement waited for every large one ahead of it")
	}
	eventually.Succeeds(t, 5*time.Minute, "the flood applied", func() error {
		if n, r := len(m.Registry().Snapshot().Services()), m.Rejected(registry.OriginAnnouncement); n != floodN+1 || r != int64(overN) {
			return fmt.Errorf("services %d, rejected %d; want %d and %d", n, r, floodN+1, overN)
		}
		return nil
	})
	t.Logf("flood done %v after the normal announcement was sent", time.Since(normalSent))
}
