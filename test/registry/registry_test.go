// Package registry tests, on the real broker, what the gateway does with
// what tool services announce: one bad announcement does not hold up
// readiness, withdrawn services leave nothing behind, a service lives while
// any of its replicas (real echo-service processes) does — through a
// rolling update, not after a crash — and a claim stays with its holder.
package registry

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
)

type gateway struct {
	base string // the admin listener: detailed /readyz
	gw   *app.Gateway
	stop func() error // ends Run (as SIGTERM does) and returns its error
}

// startGateway runs a gateway in this process that reads announcements
// from topic and has no registry file.
func startGateway(t *testing.T, topic string) *gateway {
	t.Helper()
	return startGatewayWith(t, "--announcements", "--announce-topic", topic)
}

func startGatewayWith(t *testing.T, extra ...string) *gateway {
	t.Helper()
	args := append([]string{"--pulsar-admin-url", brokertest.AdminURL(), "--allow-anonymous"}, extra...)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	gw := apptest.Start(t, log, args...)
	return &gateway{base: "http://" + gw.AdminAddr(), gw: gw.Gateway, stop: gw.Stop}
}

// ready returns /readyz's status code and details.
func (g *gateway) ready(t *testing.T) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(g.base + "/readyz")
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var body struct {
		Details map[string]any `json:"details"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Details
}

func (g *gateway) waitReady(t *testing.T, d time.Duration) map[string]any {
	t.Helper()
	var details map[string]any
	eventually.Succeeds(t, d, "/readyz 200", func() error {
		var code int
		if code, details = g.ready(t); code != http.StatusOK {
			return fmt.Errorf("/readyz %d: %v", code, details)
		}
		return nil
	})
	return details
}

func (g *gateway) tools(t *testing.T) int {
	_, d := g.ready(t)
	n, _ := d["tools"].(float64)
	return int(n)
}

func producer(t *testing.T, topic string) (pulsar.Client, pulsar.Producer) {
	t.Helper()
	brokertest.RequirePulsar(t)
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return c, p
}

func announcement(id, responseQueue string) []byte {
	return fmt.Appendf(nil, `{"tool-service": {%q: {"request-queue": "non-persistent://tg/request/%s", "response-queue": %q}},
"tool": {%q: {"type": "tool-service", "service": %q, "description": "announced"}}}`, id, id, responseQueue, id+"-tool", id)
}

// An announcement naming a response topic in a tenant that does not exist
// does not keep a gateway started afterwards from turning ready: the bad
// topic is listed in /readyz, the good service's tool is served.
func TestBadResponseTopicDoesNotHoldUpReadiness(t *testing.T) {
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	_, p := producer(t, topic)
	good, bad := brokertest.UniqueTopic("good"), brokertest.UniqueTopic("bad")
	badTopic := "non-persistent://nosuch-" + bad + "/response/" + bad
	for _, m := range []*pulsar.ProducerMessage{
		{Key: bad, Payload: announcement(bad, badTopic)},
		{Key: good, Payload: announcement(good, "non-persistent://tg/response/"+good)},
	} {
		if _, err := p.Send(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	// The bad topic's namespace is allowed, or the announcement would be
	// refused before any subscription is tried.
	g := startGatewayWith(t, "--announcements", "--announce-topic", topic,
		"--announce-response-namespaces", "tg/response,nosuch-"+bad+"/response")
	details := g.waitReady(t, 60*time.Second)
	t.Logf("ready %v after start", time.Since(start))
	if n := g.tools(t); n != 2 {
		t.Errorf("%d tools served, want 2", n)
	}
	// The bad topic is shown once its subscription has failed.
	eventually.True(t, 60*time.Second, "the bad response topic listed in /readyz", func() bool {
		_, details = g.ready(t)
		return strings.Contains(fmt.Sprint(details["response_topics_failing"]), badTopic)
	})
	if code, _ := g.ready(t); code != http.StatusOK {
		t.Fatalf("/readyz %d with one bad topic", code)
	}
	t.Logf("response_topics_failing: %v", details["response_topics_failing"])
}

func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Withdrawing announced services releases their response subscriptions:
// goroutines and heap come back to where they were before the services
// announced, and the broker lists no consumer on their topics.
func TestWithdrawReleasesSubscriptions(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	_, p := producer(t, topic)
	g := startGateway(t, topic)
	g.waitReady(t, 60*time.Second)
	goroutines0, heap0 := settled(t), heap()

	prefix := brokertest.UniqueTopic("svc")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	send := func(msg *pulsar.ProducerMessage) {
		p.SendAsync(t.Context(), msg, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
			}
		})
	}
	for _, id := range ids {
		send(&pulsar.ProducerMessage{Key: id, Payload: announcement(id, "non-persistent://tg/response/"+id)})
	}
	if err := p.FlushWithCtx(t.Context()); err != nil {
		t.Fatal(err)
	}
	took := eventually.True(t, 3*time.Minute, "every announced tool served", func() bool { return g.tools(t) == n })
	sample := []string{ids[0], ids[n/2], ids[n-1]}
	took += eventually.True(t, 3*time.Minute, "the response topics subscribed", func() bool {
		for _, id := range sample {
			if brokertest.Subscriptions("non-persistent://tg/response/"+id) == 0 {
				return false
			}
		}
		_, d := g.ready(t)
		return fmt.Sprint(d["response_topics_failing"]) == "[]"
	})
	goroutines1, heap1 := settled(t), heap()
	t.Logf("%d services announced and subscribed in %v: goroutines %d → %d, heap %.1f → %.1f MB",
		n, took, goroutines0, goroutines1, float64(heap0)/1e6, float64(heap1)/1e6)

	for _, id := range ids {
		send(&pulsar.ProducerMessage{Key: id}) // a tombstone
	}
	if err := p.FlushWithCtx(t.Context()); err != nil {
		t.Fatal(err)
	}
	took = eventually.True(t, 3*time.Minute, "every tool withdrawn", func() bool { return g.tools(t) == 0 })
	var goroutines2 int
	var heap2 uint64
	took += eventually.True(t, 2*time.Minute, "goroutines and heap back to the baseline", func() bool {
		goroutines2, heap2 = runtime.NumGoroutine(), heap()
		return goroutines2 <= goroutines0+25 && heap2 <= heap0+16<<20
	})
	t.Logf("withdrawn and released in %v: goroutines %d, heap %.1f MB", took, goroutines2, float64(heap2)/1e6)
	for _, id := range sample {
		if c := brokertest.Subscriptions("non-persistent://tg/response/" + id); c != 0 {
			t.Errorf("the broker still lists %d consumer(s) on %s's response topic", c, id)
		}
	}
}

// settled waits until the number of goroutines holds still for 200 ms
// (what was started has finished starting) and returns it.
func settled(t *testing.T) int {
	t.Helper()
	var n int
	var since time.Time // when the count was last seen to change
	eventually.True(t, time.Minute, "the goroutines settle", func() bool {
		if m := runtime.NumGoroutine(); m != n || since.IsZero() {
			n, since = m, time.Now()
		}
		return time.Since(since) >= 200*time.Millisecond
	})
	return n
}
