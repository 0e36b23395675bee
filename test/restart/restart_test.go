// Package restart stops and restarts a real Pulsar broker under a running
// gateway. It uses a broker of its own (ports 16650/18080) so that the other
// test packages, which share the main broker, are not disturbed.
package restart

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/toolservice"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	brokerPort = "16650"
	webPort    = "18080"
	pulsarURL  = "pulsar://127.0.0.1:" + brokerPort
	adminURL   = "http://127.0.0.1:" + webPort
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pulsar-client-go v0.19: a closed producer's send-timeout goroutine
		// only notices the close when its timer next fires.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
	)
}

// dataDir keeps the broker's metadata across the restart, as a production
// broker's does, so tenants and namespaces exist when clients reconnect.
var dataDir string

func pulsarScript(t *testing.T, verb string) {
	t.Helper()
	cmd := exec.Command("scripts/pulsar.sh", verb)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "PULSAR_BROKER_PORT="+brokerPort, "PULSAR_WEB_PORT="+webPort, "PULSAR_DATA_DIR="+dataDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/pulsar.sh %s (ports %s/%s): %v\n%s", verb, brokerPort, webPort, err, out)
	}
}

func consumers(topic string) int {
	scheme, rest, _ := strings.Cut(topic, "://")
	resp, err := http.Get(adminURL + "/admin/v2/" + scheme + "/" + rest + "/stats")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var st struct {
		Subscriptions map[string]struct {
			Consumers []any `json:"consumers"`
		} `json:"subscriptions"`
	}
	if resp.StatusCode != http.StatusOK || decodeJSON(resp, &st) != nil {
		return 0
	}
	n := 0
	for _, s := range st.Subscriptions {
		n += len(s.Consumers)
	}
	return n
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestBrokerRestartUnderLoad(t *testing.T) {
	dataDir = t.TempDir()
	pulsarScript(t, "up")
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			pulsarScript(t, "down")
		}
	})

	topic := testenv.UniqueTopic("restart")
	reqTopic, respTopic := "non-persistent://tg/request/"+topic, "non-persistent://tg/response/"+topic
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	svc, err := toolservice.New(toolservice.Config{ID: "restart-echo", Topic: topic, PulsarURL: pulsarURL, MaxConcurrency: 256, StopGrace: time.Second, Logger: log}, echo.Handle)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := svc.Run(ctx); err != nil {
			t.Errorf("echo service: %v", err)
		}
	}()

	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, fmt.Appendf(nil, "tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, service: echo-service}\n", topic), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--pulsar-url", pulsarURL,
		"--registry", reg, "--shutdown-grace", "2s", "--allow-anonymous"}, func(string) string { return "" }, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := app.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := gw.Run(ctx); err != nil {
			t.Errorf("gateway: %v", err)
		}
	}()
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := toolgatev1.NewToolServiceClient(conn)
	invoke := func(ctx context.Context, args map[string]any) (string, error) {
		s, _ := structpb.NewStruct(args)
		r, err := client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: s})
		return r.GetOutput(), err
	}
	waitUntil(t, 30*time.Second, "service and gateway subscribed", func() bool { return consumers(reqTopic) > 0 && consumers(respTopic) > 0 })
	if got, err := invoke(t.Context(), map[string]any{"msg": "before"}); err != nil || got != "before" {
		t.Fatalf("before the restart: %q %v", got, err)
	}

	// Calls in flight when the broker goes away end by their deadline, with
	// UNAVAILABLE or DEADLINE_EXCEEDED; none hangs.
	const n, deadline = 40, 6 * time.Second
	type result struct {
		err  error
		late time.Duration
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			cctx, ccancel := context.WithTimeout(context.Background(), deadline)
			defer ccancel()
			dl, _ := cctx.Deadline()
			_, err := invoke(cctx, map[string]any{"mode": "sleep", "ms": 4000.0, "msg": fmt.Sprint(i)})
			results <- result{err, time.Since(dl)}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	pulsarScript(t, "down")
	stopped = true
	for range n {
		r := <-results
		if c := status.Code(r.err); c != codes.Unavailable && c != codes.DeadlineExceeded {
			t.Errorf("a call in flight during the outage ended with %v, want UNAVAILABLE or DEADLINE_EXCEEDED", r.err)
		}
		if r.late > time.Second {
			t.Errorf("a call ended %v after its deadline", r.late)
		}
	}

	// The broker comes back: producers and consumers reattach by themselves
	// and the first call succeeds, without restarting anything.
	pulsarScript(t, "up")
	stopped = false
	waitUntil(t, 60*time.Second, "service and gateway subscribed again", func() bool { return consumers(reqTopic) > 0 && consumers(respTopic) > 0 })
	if got, err := invoke(t.Context(), map[string]any{"msg": "after"}); err != nil || got != "after" {
		t.Fatalf("first call after the restart: %q %v", got, err)
	}
}
