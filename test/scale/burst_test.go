package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	burstCalls    = 10000
	bursts        = 5
	burstDeadline = 30 * time.Second
	// burstAnswered is what "well before its deadline" means here: the
	// deadline each call is given, so that one answered later ends with
	// DEADLINE_EXCEEDED, an outcome, rather than a measured time.
	burstAnswered = burstDeadline / 2
)

// atDeadline reports whether a burst call's outcome is its deadline's.
func atDeadline(outcome string) bool {
	return outcome == "DeadlineExceeded" || strings.Contains(outcome, "deadline exceeded") || strings.HasPrefix(outcome, "HTTP 504")
}

// gatewayProcess builds and starts cmd/gateway as a process of its own: a
// burst of 10,000 REST calls needs 10,000 connections at each end, more
// descriptors than one process may hold here.
func gatewayProcess(t *testing.T, regPath string, extra ...string) (grpcAddr, httpAddr string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gateway")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/gateway")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/gateway: %v\n%s", err, out)
	}
	grpcAddr, httpAddr = freeLoopback(t), freeLoopback(t)
	args := append([]string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--admin-addr", "127.0.0.1:0",
		"--pulsar-url", brokertest.PulsarURL(), "--pulsar-admin-url", brokertest.AdminURL(),
		"--registry", regPath, "--allow-anonymous", "--instance-id", brokertest.UniqueTopic("gw-burst"),
		"--log-level", "error", "--max-timeout", "60s"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	eventually.Succeeds(t, 60*time.Second, "gateway ready", func() error {
		select {
		case <-done:
			t.Fatal("gateway exited before it was ready")
		default:
		}
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d", resp.StatusCode)
		}
		return nil
	})
	return grpcAddr, httpAddr
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	return brokertest.FreeAddr(t)
}

// burstOutcome is one call of a burst.
type burstOutcome struct {
	outcome string // "ok", "wrong: …", or the error's code
	elapsed time.Duration
}

// TestBurstsAnswered: bursts of 10,000 concurrent calls, over gRPC and
// over REST, five each, to the Go echo service (64 handlers at a time, a
// request queue of 2,000):
// every call is answered — ok, or an error — well before its 30 s
// deadline, none with another call's answer. A request topic is
// non-persistent: the broker drops what the service's consumer has no room
// for, and such a call used to hear nothing until its deadline. The
// gateway now bounds the calls in flight per service and fails those that
// wait too long for a slot fast, with RESOURCE_EXHAUSTED and a retry hint.
func TestBurstsAnswered(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Fatalf("the Pulsar broker is required: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
	topic := brokertest.UniqueTopic("burst-echo")
	regPath := filepath.Join(t.TempDir(), "registry.yaml")
	reg := fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, description: echo, service: echo-service}\n", topic)
	if err := os.WriteFile(regPath, []byte(reg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The SDK's default concurrency, and a request queue of 2,000: a
	// service that takes fewer requests ahead than a burst brings (a
	// Python one takes 1,000).
	startEchoWith(t, "burst-echo", topic, 0, 2000)
	grpcAddr, httpAddr := gatewayProcess(t, regPath, strings.Fields(os.Getenv("TOOLGATE_BURST_GATEWAY_FLAGS"))...)

	var conns []toolgatev1.ToolServiceClient
	for range 8 {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns = append(conns, toolgatev1.NewToolServiceClient(conn))
	}
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: burstCalls, IdleConnTimeout: 90 * time.Second}}
	t.Cleanup(httpClient.CloseIdleConnections)

	callGRPC := func(ctx context.Context, i int, msg string) string {
		args, _ := structpb.NewStruct(map[string]any{"msg": msg})
		resp, err := conns[i%len(conns)].InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args})
		if err != nil {
			return status.Code(err).String()
		}
		if resp.GetOutput() != msg {
			return fmt.Sprintf("wrong: %q for %q", resp.GetOutput(), msg)
		}
		return "ok"
	}
	callREST := func(ctx context.Context, _ int, msg string) string {
		body, _ := json.Marshal(map[string]any{"arguments": map[string]any{"msg": msg}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+"/v1/tools/echo:invoke", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			return "transport: " + err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			var st struct {
				Details []struct {
					Reason string `json:"reason"`
				} `json:"details"`
			}
			_ = json.Unmarshal(b, &st)
			reason := ""
			if len(st.Details) > 0 {
				reason = " " + st.Details[0].Reason
			}
			return fmt.Sprintf("HTTP %d%s", resp.StatusCode, reason)
		}
		var out struct {
			Output string `json:"output"`
		}
		if err := json.Unmarshal(b, &out); err != nil || out.Output != msg {
			return fmt.Sprintf("wrong: %s for %q", b, msg)
		}
		return "ok"
	}

	for _, door := range []struct {
		name string
		call func(ctx context.Context, i int, msg string) string
	}{{"gRPC", callGRPC}, {"REST", callREST}} {
		for b := range bursts {
			out := make([]burstOutcome, burstCalls)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range burstCalls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ctx, cancel := context.WithTimeout(t.Context(), burstAnswered)
					defer cancel()
					t0 := time.Now()
					out[i].outcome = door.call(ctx, i, fmt.Sprintf("%s-%d-%d", door.name, b, i))
					out[i].elapsed = time.Since(t0)
				}()
			}
			close(start)
			wg.Wait()
			counts := map[string]int{}
			var slowest time.Duration
			late, wrong := 0, 0
			for _, o := range out {
				counts[o.outcome]++
				slowest = max(slowest, o.elapsed)
				if atDeadline(o.outcome) {
					late++
				}
				if strings.HasPrefix(o.outcome, "wrong") {
					wrong++
				}
			}
			var parts []string
			for k, v := range counts {
				parts = append(parts, fmt.Sprintf("%s %d", k, v))
			}
			sort.Strings(parts)
			t.Logf("%s burst %d: %s; slowest %v", door.name, b+1, strings.Join(parts, ", "), slowest.Round(time.Millisecond))
			if late > 0 || wrong > 0 {
				t.Errorf("%s burst %d: %d calls not answered within %v (deadline %v), %d wrong", door.name, b+1, late, burstAnswered, burstDeadline, wrong)
			}
		}
	}
}
