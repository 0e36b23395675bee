package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/registry/pulsarsrc"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
)

// floodN is the number of new service ids of TestAnnouncementFlood.
const floodN = 2000

// TestAnnouncementFlood: while a Go SDK service (an echo-service process)
// is called through a gateway, a party that may announce publishes 2,000
// announcements of new service ids at once, as SDK instances with a lease
// would. The echo service stays listed throughout and every call is
// answered, during the flood and for more than a lease after it began
// (its renewals are never held up behind the new ids); every announcement
// of the flood is either admitted or refused and counted, and what the
// gateway keeps of it is bounded by its admission limits, not by the
// flood's size.
func TestAnnouncementFlood(t *testing.T) {
	brokertest.RequirePulsar(t)
	bin := buildEcho(t)
	annTopic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	id, topic := brokertest.UniqueTopic("flood-echo"), brokertest.UniqueTopic("flood")
	g := startGRPCGateway(t, annTopic)
	startReplica(t, bin, id, topic, annTopic)
	waitListed(t, g, "echo")
	renewals := countRenewals(t, annTopic, id)
	l := startLoad(t, []*grpcGateway{g}, "echo", 50)
	l.waitCalls(t, 50, "before the flood")
	heap0 := heap()

	// Every check of the test, during the flood and after: the echo
	// service listed (the load's watcher lists the tools every 20 ms) and
	// every call answered.
	intact := func(when string) {
		t.Helper()
		if l.unlisted.Load() != 0 || l.failed.Load() != 0 {
			l.stop()
			t.Fatalf("%s: echo not listed or a call failed: %s", when, l.report())
		}
	}

	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL(), Logger: plog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: annTopic, MaxPendingMessages: floodN,
		BatchingMaxPublishDelay: 5 * time.Millisecond, BatchingMaxMessages: 500})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	prefix := brokertest.UniqueTopic("zflood") // listed after echo
	var sendErr atomic.Pointer[error]
	start := time.Now()
	renewed := renewals.Load()
	for i := range floodN {
		svc := fmt.Sprintf("%s-%d", prefix, i)
		p.SendAsync(t.Context(), &pulsar.ProducerMessage{Key: wire.AnnounceKey(svc, "x"),
			Payload:    fmt.Appendf(nil, `{"tool-service": {%q: {"topic": %q}}, "tool": {%q: {"type": "tool-service", "service": %q}}}`, svc, svc, svc+"-tool", svc),
			Properties: map[string]string{wire.PropInstance: "x", wire.PropLease: "8s"}},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					sendErr.CompareAndSwap(nil, &err)
				}
			})
	}
	if err := p.FlushWithCtx(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := sendErr.Load(); err != nil {
		t.Fatal(*err)
	}
	t.Logf("%d announcements of new service ids published in %v", floodN, time.Since(start).Round(time.Millisecond))

	// Every announcement of the flood admitted or refused.
	var st map[string]any
	eventually.Succeeds(t, 3*time.Minute, "the flood admitted or refused", func() error {
		intact("during the flood")
		st = announcementStatus(t, g)
		if n := flooded(st); n < floodN {
			return fmt.Errorf("%d of the %d announcements accounted for: %v", n, floodN, st)
		}
		return nil
	})
	accounted := time.Since(start)
	t.Logf("flood accounted for %v after it began: %v", accounted.Round(time.Millisecond), st)

	// More than a lease after the flood began, the echo service renewed
	// all along: its lease would have run out had its renewals waited.
	enough := int64(toolservice.DefaultLease/(toolservice.DefaultLease/3)) + 1
	eventually.True(t, 2*time.Minute, fmt.Sprintf("%d renewals of echo since the flood began", enough), func() bool {
		intact("after the flood")
		return renewals.Load()-renewed >= enough
	})
	l.stop()
	intact("at the end")
	st = announcementStatus(t, g)
	heap1 := heap()
	t.Logf("%v after the flood began: %s; heap %.1f → %.1f MB; %v", time.Since(start).Round(time.Millisecond), l.report(),
		float64(heap0)/1e6, float64(heap1)/1e6, st)

	// What the gateway keeps: at most what it admits by the time the
	// flood was accounted for (a burst, then so many a second), the rest
	// refused and counted.
	kept := int(num(st, "units")) + int(num(st, "departed")) - 1
	if bound := pulsarsrc.DefaultNewBurst + int(accounted.Seconds()+1)*pulsarsrc.DefaultNewPerSecond; kept > bound {
		t.Errorf("%d services of the flood kept, more than the admissions allow (%d)", kept, bound)
	}
	if refused := int(num(st, "throttled")); kept+refused != floodN {
		t.Errorf("%d services of the flood kept and %d refused, want %d in all", kept, refused, floodN)
	}
	if num(st, "instances") > registry.DefaultMaxAnnouncedInstances {
		t.Errorf("%v instances kept, more than the limit %d", num(st, "instances"), registry.DefaultMaxAnnouncedInstances)
	}
}

// countRenewals counts the announcements of service id's instances read
// on annTopic from now on.
func countRenewals(t *testing.T, annTopic, id string) *atomic.Int64 {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL(), Logger: plog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: annTopic, StartMessageID: pulsar.LatestMessageID()})
	if err != nil {
		c.Close()
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
				if !errors.Is(err, context.Canceled) {
					t.Errorf("reading %s: %v", annTopic, err)
				}
				return
			}
			if strings.HasPrefix(msg.Key(), id+"@") && len(msg.Payload()) > 0 {
				n.Add(1)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; r.Close(); c.Close() })
	return &n
}

// announcementStatus is the announcements' entry of the gateway's
// registry_sources (/readyz details).
func announcementStatus(t *testing.T, g *grpcGateway) map[string]any {
	t.Helper()
	_, d := g.ready(t)
	list, _ := d["registry_sources"].([]any)
	for _, s := range list {
		if m, ok := s.(map[string]any); ok && m["origin"] == string(registry.OriginAnnouncement) {
			return m
		}
	}
	return nil
}

// flooded is how many announcements the status accounts for besides the
// echo service: services kept (announcing or departed) and refusals.
func flooded(st map[string]any) int {
	return int(num(st, "units")+num(st, "departed")+num(st, "rejected")) - 1
}

func num(m map[string]any, k string) float64 {
	f, _ := m[k].(float64)
	return f
}
