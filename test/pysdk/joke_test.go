package pysdk

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/wire"
)

// startJoke runs TrustGraph's joke service converted to toolgate
// (sdk/python/examples/joke.py: its import of DynamicToolService changed)
// with TrustGraph's command line and toolgate's flags for its announcement.
func startJoke(t *testing.T, name, id, topic, annTopic string, extra ...string) *pyService {
	t.Helper()
	return startExample(t, name, "joke.py", topic, append([]string{
		"-p", brokertest.PulsarURL(), "--id", id, "-t", topic, "--no-metrics", "--no-loki-enabled",
		"--tool-name", "tell-joke", "--config-param", "style", "--tool-config", "style=pun",
		"--announce-topic", annTopic}, extra...)...)
}

// TestTrustGraphJokeBehindGateways: the converted joke service announces
// its tool to three gateways, answers each on its own reply topic — one
// delivery per call, none on the shared response topic, where
// TrustGraph's unconverted service has every reply delivered to every
// gateway — and on SIGTERM withdraws and exits 0.
func TestTrustGraphJokeBehindGateways(t *testing.T) {
	brokertest.RequirePulsar(t)
	t.Parallel()
	uniq := brokertest.UniqueTopic("pysdk-joke")
	annTopic := "persistent://tg/config/" + uniq
	gws := []*gateway{startGateway(t, annTopic, uniq+"-a"), startGateway(t, annTopic, uniq+"-b"), startGateway(t, annTopic, uniq+"-c")}
	svc := startJoke(t, "joke.py", uniq, uniq, annTopic, "--announce-lease", "30", "--stop-grace", "3")
	for _, g := range gws {
		g.waitListed(t, "tell-joke")
	}
	for _, g := range gws {
		for _, topic := range []string{"llamas", "programming"} {
			r, err := g.invoke(t.Context(), "tell-joke", map[string]any{"topic": topic})
			if err != nil || r.HTTP != http.StatusOK || !strings.HasPrefix(r.Output, "Here's a pun for you:\n\n") {
				t.Fatalf("%s, topic %s: %+v, %v", g.id, topic, r, err)
			}
			if topic == "llamas" && !strings.Contains(strings.ToLower(r.Output), "llama") {
				t.Errorf("a joke about llamas without one: %q", r.Output)
			}
		}
	}
	if n := deliveries(t, wire.ResponseTopic(uniq)); n != 0 {
		t.Errorf("%d replies delivered from the shared response topic; want every one on its gateway's reply topic", n)
	}
	calls := int64(2 * len(gws))
	onReplyTopics := settled(t, "reply deliveries", func() int64 {
		var n int64
		for _, g := range gws {
			n += deliveries(t, wire.ReplyTopic(g.id))
		}
		return n
	})
	t.Logf("%d calls through %d gateways: %d reply deliveries (%.2f per call)", calls, len(gws), onReplyTopics, float64(onReplyTopics)/float64(calls))
	if onReplyTopics != calls {
		t.Errorf("%d reply deliveries for %d calls through %d gateways; want one per call", onReplyTopics, calls, len(gws))
	}
	if err := svc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for _, g := range gws {
		eventually.True(t, 5*time.Second, "the stopping service unlisted by "+g.id, func() bool { return len(g.tools(t)) == 0 })
	}
	if code := svc.exitCode(t, 3*time.Second+3*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0", code)
	}
}
