package pysdk

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
)

// TestPythonEchoRollingUpdate replaces the three replicas of the Python
// echo service one by one, twice over (start a new one, once it has
// announced SIGTERM an old one), under a steady load through two gateways:
// every call is answered with its own message, both gateways list the
// tools throughout, and every replica stopped exits 0. A request the
// broker hands to a stopping replica's closing consumer is published again
// by the gateway (receipts): no call may fail.
func TestPythonEchoRollingUpdate(t *testing.T) {
	brokertest.RequirePulsar(t)
	t.Parallel()
	uniq := brokertest.UniqueTopic("pysdk-roll")
	annTopic := "persistent://tg/config/" + uniq
	gws := []*gateway{startGateway(t, annTopic, uniq+"-a"), startGateway(t, annTopic, uniq+"-b")}
	n := 0
	start := func() *pyService {
		n++
		p := startEcho(t, fmt.Sprintf("echo-%d.py", n), uniq, uniq, annTopic, "--announce-lease", "3", "--stop-grace", "5")
		eventually.True(t, 30*time.Second, p.name+" announced", func() bool { return strings.Contains(p.output(), "announced:") })
		return p
	}
	live := []*pyService{start(), start(), start()}
	for _, g := range gws {
		g.waitListed(t, "count", "echo")
	}

	ctx, stopLoad := context.WithCancel(t.Context())
	var calls, failed atomic.Int64
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				g := gws[(w+i)%len(gws)]
				msg := fmt.Sprintf("w%d-%d", w, i)
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				r, err := g.invoke(cctx, "echo", map[string]any{"msg": msg})
				cancel()
				if ctx.Err() != nil {
					return // the load's end, not the call's
				}
				calls.Add(1)
				if err != nil || r.HTTP != http.StatusOK || r.Output != msg {
					failed.Add(1)
					mu.Lock()
					if len(failures) < 10 {
						failures = append(failures, fmt.Sprintf("%s via %s: HTTP %d %q %s %v", msg, g.id, r.HTTP, r.Output, r.Message, err))
					}
					mu.Unlock()
				}
			}
		})
	}
	// The listings, every 50 ms (a goroutine's: it reports, not fails).
	listed := make(chan string, 1)
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, g := range gws {
				if names, err := listing(ctx, g); ctx.Err() == nil && (err != nil || len(names) != 2) {
					select {
					case listed <- fmt.Sprintf("%s listed %v (%v)", g.id, names, err):
					default:
					}
				}
			}
		}
	})

	began := time.Now()
	for round := range 2 {
		for i := range live {
			old := live[i]
			live[i] = start()
			if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := old.exitCode(t, 5*time.Second+3*time.Second); code != 0 {
				t.Errorf("round %d: %s exited %d after SIGTERM, want 0", round, old.name, code)
			}
		}
	}
	took := time.Since(began)
	stopLoad()
	wg.Wait()
	t.Logf("6 replicas replaced in %v under load: %d calls (%.0f/s), %d failed", took.Round(time.Millisecond), calls.Load(),
		float64(calls.Load())/took.Seconds(), failed.Load())
	if calls.Load() < 100 {
		t.Errorf("only %d calls during the update: no load to speak of", calls.Load())
	}
	if failed.Load() > 0 {
		t.Errorf("%d of %d calls failed during the rolling update: %s", failed.Load(), calls.Load(), strings.Join(failures, "; "))
	}
	select {
	case s := <-listed:
		t.Errorf("a gateway did not list the tools throughout: %s", s)
	default:
	}
}

// listing is the gateway's tool names, or why it could not be read.
func listing(ctx context.Context, g *gateway) ([]string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/v1/tools", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	var names []string
	for _, tl := range body.Tools {
		names = append(names, tl.Name)
	}
	return names, nil
}
