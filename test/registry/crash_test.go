package registry

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// crashBound is how soon after every replica of a service is killed its
// tool must stop being listed, and calls to it fail at once: the bound the
// documentation gives (10 s), the SDK's lease (toolservice.DefaultLease,
// 8 s, counted from the last renewal, which came before the kill) and 2 s
// for the renewal's way through the bookie, the gateway's timer and this
// test's polling. Asserted as an event with a deadline.
const crashBound = toolservice.DefaultLease + 2*time.Second

// TestCrashedServiceGone: every replica of a Go SDK service is SIGKILLed.
// Within crashBound (10 s) the gateways stop listing its tool and a call to it
// fails with UNAVAILABLE (SERVICE_GONE) without waiting for its deadline;
// a gateway started afterwards does not list it either; a replica started
// again brings it back.
func TestCrashedServiceGone(t *testing.T) {
	brokertest.RequirePulsar(t)
	bin := buildEcho(t)
	annTopic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	id, topic := brokertest.UniqueTopic("crash-echo"), brokertest.UniqueTopic("crash")
	withAdmin := startGRPCGateway(t, annTopic)
	// Without the admin API the gateway has no fail-fast check of the
	// request topic's consumers: only the lease tells it the service is gone.
	withoutAdmin := startGRPCGateway(t, annTopic, "--pulsar-admin-url", "")
	gws := []*grpcGateway{withAdmin, withoutAdmin}
	replicas := []*replica{startReplica(t, bin, id, topic, annTopic), startReplica(t, bin, id, topic, annTopic)}
	for _, g := range gws {
		waitListed(t, g, "echo")
		if err := g.invoke(t.Context(), "echo", "before", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	for _, r := range replicas {
		r.stop(t, syscall.SIGKILL)
	}
	killed := time.Now()
	for i, g := range gws {
		// Counted from the kill, for both gateways.
		left := crashBound - time.Since(killed)
		eventually.True(t, left, "the crashed service's tool unlisted", func() bool {
			ok, err := g.listed(t.Context(), "echo")
			return err == nil && !ok
		})
		t.Logf("gateway %d: echo unlisted %v after the kill", i, time.Since(killed).Round(time.Millisecond))
		// A deadline far beyond the bound: a call that waited for a reply
		// would end with DEADLINE_EXCEEDED, not UNAVAILABLE.
		err := g.invoke(t.Context(), "echo", "after", 30*time.Second)
		if status.Code(err) != codes.Unavailable || reason(err) != "SERVICE_GONE" {
			t.Fatalf("gateway %d: a call to the crashed service's tool: %v (%s); want UNAVAILABLE SERVICE_GONE", i, err, reason(err))
		}
	}

	// A gateway started now reads the announcements left on the topic:
	// their leases ran out before it came.
	late := startGRPCGateway(t, annTopic)
	if ok, err := late.listed(t.Context(), "echo"); err != nil || ok {
		t.Fatalf("a gateway started after the crash lists echo: %v, %v", ok, err)
	}
	if err := late.invoke(t.Context(), "echo", "late", 30*time.Second); status.Code(err) != codes.Unavailable || reason(err) != "SERVICE_GONE" {
		t.Fatalf("late gateway: a call to the crashed service's tool: %v; want UNAVAILABLE SERVICE_GONE", err)
	}

	// A replica started again brings the tool back everywhere.
	startReplica(t, bin, id, topic, annTopic)
	for i, g := range append(gws, late) {
		waitListed(t, g, "echo")
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := g.invoke(ctx, "echo", "again", 10*time.Second)
		cancel()
		if err != nil {
			t.Fatalf("gateway %d after a replica started again: %v", i, err)
		}
	}
}
