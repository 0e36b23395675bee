// Package scale runs several gateway replicas, in process, against the real
// Pulsar broker, with Go and TrustGraph Python tool services behind them,
// and checks from the broker's own topic statistics that reply traffic
// stays at one delivery per call for services that honour reply-to.
package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	replicas  = 3
	calls     = 3000
	pyEvery   = 10 // every 10th call goes to the Python service
	workers   = 48
	jokeStart = "Here's a pun for you:\n\n"
)

type gateway struct {
	id     string
	gw     *app.Gateway
	client toolgatev1.ToolServiceClient
	stop   func() error // ends the gateway; later calls return the same
}

func startGateway(t *testing.T, regPath, id string, extra ...string) *gateway {
	t.Helper()
	args := append([]string{"--pulsar-admin-url", brokertest.AdminURL(),
		"--registry", regPath, "--allow-anonymous", "--instance-id", id}, extra...)
	// Errors only: the victim's cut calls would log a warning each.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	gw := apptest.Start(t, log, args...)
	g := &gateway{id: id, gw: gw.Gateway, stop: gw.Stop}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g.client = toolgatev1.NewToolServiceClient(conn)
	gw.WaitReady(t, 60*time.Second)
	return g
}

func startEcho(t *testing.T, id, topic string) { t.Helper(); startEchoWith(t, id, topic, 256, 0) }

// startEchoWith starts an echo service handling at most concurrency calls
// at once, with a request queue of queue (0s: the SDK's defaults).
func startEchoWith(t *testing.T, id, topic string, concurrency, queue int) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := toolservice.New(toolservice.Config{ID: id, Topic: topic, PulsarURL: brokertest.PulsarURL(), MaxConcurrency: concurrency, RequestQueue: queue, Logger: log}, echo.Handle)
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RunService(t, "echo", svc, 30*time.Second)
}

// outcome is one call's result.
type outcome struct {
	gw      int
	tool    string
	err     error
	elapsed time.Duration
}

// invoke calls tool through g: echo with a message of its own (the reply
// must be that message), or the Python joke service.
func invoke(ctx context.Context, g *gateway, tool, msg string) error {
	args := map[string]any{"msg": msg}
	if tool == "py-tell-joke" {
		args = map[string]any{"topic": "programming"}
	}
	if tool == "slow-echo" {
		tool, args = "echo", map[string]any{"mode": "sleep", "ms": 300, "msg": msg}
	}
	st, err := structpb.NewStruct(args)
	if err != nil {
		return err
	}
	resp, err := g.client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: tool, Arguments: st})
	if err != nil {
		return err
	}
	switch {
	case tool == "py-tell-joke" && !strings.HasPrefix(resp.GetOutput(), jokeStart):
		return fmt.Errorf("mis-routed: py-tell-joke answered %q", resp.GetOutput())
	case tool == "echo" && resp.GetOutput() != msg:
		return fmt.Errorf("mis-routed: echo %q answered %q", msg, resp.GetOutput())
	}
	return nil
}

// TestReplyToAtScale: 3 gateways, 2 Go echo replicas and TrustGraph's
// Python joke service on one broker.
func TestReplyToAtScale(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Fatalf("the Pulsar broker is required: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
	echoTopic, jokeTopic := brokertest.UniqueTopic("scale-echo"), brokertest.UniqueTopic("scale-pyjoke")
	regPath := filepath.Join(t.TempDir(), "registry.yaml")
	reg := fmt.Sprintf(`tool-service:
  echo-service: {topic: %s}
  py-joke-service: {topic: %s, config-params: [style]}
tool:
  echo: {type: tool-service, description: echo, service: echo-service}
  py-tell-joke:
    type: tool-service
    description: TrustGraph's Python joke service
    service: py-joke-service
    style: pun
    arguments: [{name: topic, type: string}]
`, echoTopic, jokeTopic)
	if err := os.WriteFile(regPath, []byte(reg), 0o644); err != nil {
		t.Fatal(err)
	}
	startEcho(t, "scale-echo", echoTopic)
	startEcho(t, "scale-echo", echoTopic) // a second replica, same subscription
	startPythonJokes(t, jokeTopic)
	run := brokertest.UniqueTopic("gw")
	var gws []*gateway
	for i := range replicas {
		// The last is the kill test's victim: with a grace period of 1ms
		// its calls in flight are cut when it stops.
		var extra []string
		if i == replicas-1 {
			extra = []string{"--shutdown-grace", "1ms"}
		}
		gws = append(gws, startGateway(t, regPath, fmt.Sprintf("%s-%d", run, i), extra...))
	}
	victim := gws[replicas-1]

	echoShared, jokeShared := wire.ResponseTopic(echoTopic), wire.ResponseTopic(jokeTopic)
	replyTopics := func() []string {
		var ts []string
		for _, g := range gws {
			ts = append(ts, wire.ReplyTopic(g.id))
		}
		return ts
	}()
	sum := func(topics ...string) int64 {
		var n int64
		for _, tp := range topics {
			n += deliveries(t, tp)
		}
		return n
	}
	orphans := func() float64 {
		var n float64
		for _, g := range gws {
			n += metric(t, g.gw.AdminAddr(), "toolgate_bridge_orphan_replies_total")
		}
		return n
	}

	t.Run("3000 calls over 3 gateways each get their own reply", func(t *testing.T) {
		// Warm up: one call per gateway and tool, so producers exist.
		for _, g := range gws {
			for _, tool := range []string{"echo", "py-tell-joke"} {
				if err := invoke(t.Context(), g, tool, "warm-up"); err != nil {
					t.Fatalf("warm-up %s via %s: %v", tool, g.id, err)
				}
			}
		}
		waitQuiet(t, func() int64 { return sum(append(replyTopics, echoShared, jokeShared)...) })
		replyBefore, echoBefore, jokeBefore := sum(replyTopics...), sum(echoShared), sum(jokeShared)
		orphansBefore := orphans()

		results := runCalls(t, calls, func(i int) (int, string, string) {
			tool := "echo"
			if i%pyEvery == 0 {
				tool = "py-tell-joke"
			}
			return i % replicas, tool, fmt.Sprintf("call-%d", i)
		}, func(i int) *gateway { return gws[i] }, 20*time.Second)
		var echoCalls, jokeCalls int64
		var failed []string
		for _, r := range results {
			if r.tool == "echo" {
				echoCalls++
			} else {
				jokeCalls++
			}
			if r.err != nil {
				failed = append(failed, fmt.Sprintf("%s via gateway %d: %v", r.tool, r.gw, r.err))
			}
		}
		if len(failed) > 0 {
			t.Fatalf("%d of %d calls lost or mis-routed, e.g. %s", len(failed), calls, failed[0])
		}
		waitQuiet(t, func() int64 { return sum(append(replyTopics, echoShared, jokeShared)...) })
		replies, echoOnShared, jokeOnShared := sum(replyTopics...)-replyBefore, sum(echoShared)-echoBefore, sum(jokeShared)-jokeBefore
		goPerCall := float64(replies+echoOnShared) / float64(echoCalls)
		pyPerCall := float64(jokeOnShared) / float64(jokeCalls)
		// The broker's counters settle once the replies are sent; the
		// gateways may still be taking the last ones from their queues.
		want := float64((len(gws) - 1) * int(jokeCalls))
		orphaned := orphans() - orphansBefore
		eventually.Holds(10*time.Second, func() bool {
			orphaned = orphans() - orphansBefore
			return orphaned >= want
		})
		t.Logf("broker deliveries to gateways: Go echo %d calls → %d on reply topics + %d on its response topic = %.3f per call; Python joke %d calls → %d = %.3f per call; gateways dropped %.0f replies of other replicas",
			echoCalls, replies, echoOnShared, goPerCall, jokeCalls, jokeOnShared, pyPerCall, orphaned)
		if goPerCall < 1 || goPerCall > 1.05 {
			t.Errorf("Go service: %.3f reply deliveries per call, want 1 (≤ 1.05)", goPerCall)
		}
		if echoOnShared != 0 {
			t.Errorf("Go service: %d replies on its shared response topic, want 0", echoOnShared)
		}
		// Python services answer on the shared topic, which every
		// replica receives: R per call, the known cost.
		if r := float64(len(gws)); pyPerCall < r-0.05 || pyPerCall > r {
			t.Errorf("Python service: %.3f reply deliveries per call, want %v (one per replica)", pyPerCall, r)
		}
		if orphaned != want {
			t.Errorf("gateways dropped %.0f replies of other replicas, want %.0f (the Python replies only)", orphaned, want)
		}
		// Each gateway names itself and the services it saw honour reply-to.
		for _, g := range gws {
			var ready struct {
				Details struct {
					Instance        string   `json:"instance"`
					ReplyTopic      string   `json:"reply_topic"`
					ReplyToServices []string `json:"reply_to_services"`
				} `json:"details"`
			}
			resp, err := http.Get("http://" + g.gw.AdminAddr() + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			err = json.NewDecoder(resp.Body).Decode(&ready)
			resp.Body.Close()
			d := ready.Details
			if err != nil || d.Instance != g.id || d.ReplyTopic != wire.ReplyTopic(g.id) || !slices.Equal(d.ReplyToServices, []string{echoShared}) {
				t.Errorf("/readyz of %s: %+v, %v; want instance %s, its reply topic, and reply_to_services [%s]", g.id, d, err, g.id, echoShared)
			}
		}
	})

	t.Run("a gateway killed mid-run loses only its own calls", func(t *testing.T) {
		all := gws
		const n, deadline = 800, 5 * time.Second
		var killed atomic.Bool
		var victimErr error
		var wg sync.WaitGroup
		var picked atomic.Int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Mid-run: once a quarter of the calls were made.
			eventually.Holds(time.Minute, func() bool { return picked.Load() >= n/4 })
			victimErr = victim.stop() // shutdown grace 1ms: its calls in flight are cut
			killed.Store(true)
		}()
		results := runCalls(t, n, func(i int) (int, string, string) {
			picked.Add(1)
			tool := "slow-echo"
			if i%pyEvery == 0 {
				tool = "py-tell-joke"
			}
			return i % len(all), tool, fmt.Sprintf("kill-%d", i)
		}, func(i int) *gateway { return all[i] }, deadline)
		wg.Wait()
		if !killed.Load() {
			t.Fatal("the victim was not stopped")
		}
		var victimFailed, victimOK int
		for _, r := range results {
			if all[r.gw] == victim {
				if r.err != nil {
					victimFailed++
				} else {
					victimOK++
				}
				continue
			}
			if r.err != nil {
				t.Errorf("%s via surviving gateway %d: %v", r.tool, r.gw, r.err)
			}
		}
		t.Logf("victim: %d calls answered before it stopped, %d ended with an error; every call of the others answered", victimOK, victimFailed)
		if victimFailed == 0 {
			t.Error("no call of the victim failed: it was not stopped mid-run")
		}
		if victimErr != nil {
			t.Errorf("victim: %v", victimErr)
		}
	})
}

// runCalls makes n calls with workers goroutines; pick says which gateway
// (index), tool and message call i uses.
func runCalls(t *testing.T, n int, pick func(i int) (int, string, string), gw func(int) *gateway, deadline time.Duration) []outcome {
	t.Helper()
	out := make([]outcome, n)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				g, tool, msg := pick(i)
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				err := invoke(ctx, gw(g), tool, msg)
				cancel()
				if tool == "slow-echo" {
					tool = "echo"
				}
				out[i] = outcome{gw: g, tool: tool, err: err, elapsed: time.Since(start)}
			}
		}()
	}
	wg.Wait()
	return out
}

// waitQuiet waits until a counter stops moving (the broker's statistics
// lag behind the deliveries by a little).
func waitQuiet(t *testing.T, f func() int64) {
	t.Helper()
	last, since := f(), time.Now() // since: when it last moved
	eventually.True(t, 10*time.Second, "the broker's delivery counters settled (unchanged for 600 ms)", func() bool {
		if n := f(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= 600*time.Millisecond
	})
}
