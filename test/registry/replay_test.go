package registry

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLateGatewayServesAsTheOthers: the registry is a function of the
// announcements' log. A holder of echo renews all along; another service
// id announces echo (refused), renews for longer than the claim grace and
// a lease, and withdraws. A gateway started then replays that history and
// serves echo from its holder at once, as the gateway that ran throughout
// does — not handing echo to the claimant that withdrew, which would
// answer echo NOT_FOUND for the claim grace.
func TestLateGatewayServesAsTheOthers(t *testing.T) {
	brokertest.RequirePulsar(t)
	bin := buildEcho(t)
	annTopic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	holder, topic := brokertest.UniqueTopic("echo-service"), brokertest.UniqueTopic("replay")
	// A claim grace short enough to wait out, long enough to see: a late
	// gateway that handed echo to the claimant would answer NOT_FOUND for
	// all of it.
	const grace = 30 * time.Second
	flags := []string{"--announce-claim-grace", grace.String()}
	a := startGRPCGateway(t, annTopic, flags...)
	startReplica(t, bin, holder, topic, annTopic)
	waitListed(t, a, "echo")

	// The claimant: another service id announcing echo on a topic of its
	// own, with a long lease (it renews every 40 s).
	claimant := brokertest.UniqueTopic("aaa-claimant")
	svc, err := toolservice.New(toolservice.Config{ID: claimant, Topic: claimant, PulsarURL: brokertest.PulsarURL(),
		Logger: slog.New(slog.DiscardHandler),
		Announce: &toolservice.Announcement{Topic: annTopic, Lease: 2 * time.Minute,
			Tools: []toolservice.Tool{{Name: "echo"}}}},
		func(context.Context, *toolservice.Request) (any, error) { return "claimant", nil })
	if err != nil {
		t.Fatal(err)
	}
	stopClaimant := brokertest.RunService(t, "claimant", svc, 30*time.Second)
	eventually.True(t, 30*time.Second, "the claimant's conflict reported", func() bool {
		_, d := a.ready(t)
		return strings.Contains(stringOf(d), claimant)
	})
	renewals := countRenewals(t, annTopic, holder)
	// History: the holder renews (every 2.7 s) for longer than the claim
	// grace and its lease after the claimant announced.
	eventually.True(t, 90*time.Second, "the holder's renewals for a claim grace and a lease", func() bool {
		return renewals.Load() >= int64((grace+8*time.Second)/(8*time.Second/3))+3
	})
	stopClaimant() // it withdraws
	if err := a.invoke(t.Context(), "echo", "before", 10*time.Second); err != nil {
		t.Fatalf("the gateway that ran throughout: echo: %v", err)
	}

	// A gateway started now replays the log.
	b := startGRPCGateway(t, annTopic, flags...)
	started := time.Now()
	var last error
	eventually.True(t, 5*time.Second, "echo answered by the gateway started after the history", func() bool {
		last = b.invoke(t.Context(), "echo", "late", 5*time.Second)
		if status.Code(last) == codes.NotFound {
			t.Fatalf("the late gateway answers echo %v (%s); the gateway that ran throughout serves it", last, reason(last))
		}
		return last == nil
	})
	for i, g := range []*grpcGateway{a, b} {
		if err := g.invoke(t.Context(), "echo", "both", 10*time.Second); err != nil {
			t.Fatalf("gateway %d: echo: %v", i, err)
		}
	}
	t.Logf("the late gateway answered echo %v after it was ready; %d renewals of the holder in the history", time.Since(started).Round(time.Millisecond), renewals.Load())
}
