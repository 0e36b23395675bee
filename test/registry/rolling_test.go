package registry

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/brokertest"
)

// TestRollingUpdate replaces the three replicas of a Go SDK service one by
// one, three times over (start a new one, SIGTERM an old one), under a
// load of about 200 calls per second through two gateways: every call is
// answered, and both gateways list the tool throughout. Each replica
// announces as an instance of the service and withdraws that instance
// only when it stops. A request the broker hands to a stopping replica's
// closing consumer, which the client library drops, is published again by
// the gateway (receipts, docs/scaling.md): no call may fail.
func TestRollingUpdate(t *testing.T) {
	brokertest.RequirePulsar(t)
	bin := buildEcho(t)
	annTopic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	id, topic := brokertest.UniqueTopic("rolling-echo"), brokertest.UniqueTopic("rolling")
	gws := []*grpcGateway{startGRPCGateway(t, annTopic), startGRPCGateway(t, annTopic)}
	var live []*replica
	for range 3 {
		live = append(live, startReplica(t, bin, id, topic, annTopic))
	}
	for _, g := range gws {
		waitListed(t, g, "echo")
	}
	l := startLoad(t, gws, "echo", 200)
	l.waitCalls(t, 200, "before the update")
	for round := range 3 {
		for i := range live {
			fresh := startReplica(t, bin, id, topic, annTopic)
			live[i].stop(t, syscall.SIGTERM)
			live[i] = fresh
			l.waitCalls(t, 100, "after a replica was replaced")
		}
		t.Logf("round %d: %s", round+1, l.report())
	}
	l.stop()
	t.Logf("rolling update: %s; gateways: receipts %v, requests published again %v", l.report(),
		[]float64{counter(t, gws[0], "toolgate_bridge_receipts_total"), counter(t, gws[1], "toolgate_bridge_receipts_total")},
		[]float64{counter(t, gws[0], "toolgate_bridge_republished_total"), counter(t, gws[1], "toolgate_bridge_republished_total")})
	if l.failed.Load() != 0 || l.unlisted.Load() != 0 {
		t.Fatalf("during the rolling update: %s", l.report())
	}
}

// counter reads one unlabelled sample from a gateway's /metrics.
func counter(t *testing.T, g *grpcGateway, name string) float64 {
	t.Helper()
	resp, err := http.Get(g.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
			return f
		}
	}
	t.Fatalf("%s has no %s", g.base, name)
	return 0
}
