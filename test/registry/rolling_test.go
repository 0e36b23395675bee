package registry

import (
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/brokertest"
	"google.golang.org/grpc/codes"
)

// TestRollingUpdate replaces the three replicas of a Go SDK service one by
// one, three times over (start a new one, SIGTERM an old one), under a
// load of about 200 calls per second through two gateways: every call is
// answered, and both gateways list the tool throughout. Each replica
// announces as an instance of the service and withdraws that instance
// only when it stops.
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
	t.Logf("rolling update: %s", l.report())
	// One request may still be lost while a stopping replica's consumer
	// closes: on a non-persistent request topic, what the broker dispatched
	// to it after the client began the close is dropped by the client and
	// not sent to another replica, and the call runs to its deadline (1
	// call in about 51,000 over 30 runs; docs/scaling.md). That one is
	// tolerated and reported; any other failure, a second such call, or
	// the tool unlisted on either gateway fails the test.
	lost := l.failureCount(codes.DeadlineExceeded.String() + " ")
	if lost == 1 {
		t.Logf("one request lost while a replica's consumer closed (known, see docs/scaling.md): %s", l.report())
	}
	if l.failed.Load() != lost || lost > 1 || l.unlisted.Load() != 0 {
		t.Fatalf("during the rolling update: %s", l.report())
	}
}
