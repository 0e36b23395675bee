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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/protobuf/types/known/structpb"
)

// Burst of unary calls answered in many chunks.
const (
	chunkedCalls  = 200
	chunkedChunks = 2000
)

// echoStreamText is what a unary call of the echo service's stream mode
// answers: its n chunks joined.
func echoStreamText(n int) string {
	var sb strings.Builder
	for i := range n {
		sb.WriteString(strconv.Itoa(i))
		if i < n-1 {
			sb.WriteByte(',')
		}
	}
	return sb.String()
}

// chunkedUnary calls echo's stream mode of n chunks as a unary call, over
// REST (:invoke, "timeout" set) or gRPC (InvokeTool, a deadline), and
// says how it ended: "whole", or what went wrong.
func chunkedUnary(ctx context.Context, g *gateway, rest bool, n int, timeout time.Duration) string {
	want := echoStreamText(n)
	if rest {
		body, _ := json.Marshal(map[string]any{"arguments": streamArgs(n), "timeout": timeout.String()})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.gw.HTTPAddr()+"/v1/tools/echo:invoke", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("HTTP %d %.200s", resp.StatusCode, b)
		}
		var out struct {
			Output string `json:"output"`
		}
		if err := json.Unmarshal(b, &out); err != nil || out.Output != want {
			return fmt.Sprintf("output of %d bytes, not the whole answer (%v)", len(out.Output), err)
		}
		return "whole"
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args, _ := structpb.NewStruct(streamArgs(n))
	r, err := g.client.InvokeTool(cctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args})
	if err != nil {
		return err.Error()
	}
	if r.GetOutput() != want {
		return fmt.Sprintf("output of %d bytes, not the whole answer", len(r.GetOutput()))
	}
	return "whole"
}

// TestChunkedUnaryBurst: 200 unary calls at once, each answered by the Go
// echo service in 2,000 chunks, half over REST and half over gRPC, three
// runs in a row: every answer whole. The gateway's flow control bounds
// what all calls together may have in flight towards it, so the broker
// never has to drop a reply message for want of room.
func TestChunkedUnaryBurst(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Fatalf("the Pulsar broker is required: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
	topic := brokertest.UniqueTopic("burst-echo")
	regPath := filepath.Join(t.TempDir(), "registry.yaml")
	reg := fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, description: echo, service: echo-service}\n", topic)
	if err := os.WriteFile(regPath, []byte(reg), 0o644); err != nil {
		t.Fatal(err)
	}
	startEcho(t, "burst-echo", topic)
	g := startGateway(t, regPath, brokertest.UniqueTopic("gw-burst"))
	for run := range 3 {
		start := time.Now()
		results := make([]string, chunkedCalls)
		var wg sync.WaitGroup
		for i := range chunkedCalls {
			wg.Go(func() { results[i] = chunkedUnary(t.Context(), g, i%2 == 0, chunkedChunks, 60*time.Second) })
		}
		wg.Wait()
		counts := map[string]int{}
		for i, r := range results {
			door := "gRPC"
			if i%2 == 0 {
				door = "REST"
			}
			counts[door+": "+r]++
		}
		t.Logf("run %d: %d calls × %d chunks in %v: %v", run+1, chunkedCalls, chunkedChunks, time.Since(start).Round(time.Millisecond), counts)
		if n := counts["REST: whole"] + counts["gRPC: whole"]; n != chunkedCalls {
			t.Errorf("run %d: %d of %d calls answered whole", run+1, n, chunkedCalls)
		}
	}
}

// startPythonStreams runs test/python/streaming_service.py (the Pulsar
// client as TrustGraph uses it: no sequence numbers, no flow control) on
// topic until the test ends, and returns once it has subscribed.
func startPythonStreams(t *testing.T, topic string) {
	t.Helper()
	v := venv(t)
	cmd := exec.Command(filepath.Join(v, "bin", "python"), filepath.Join(repoRoot(t), "test", "python", "streaming_service.py"),
		"-p", brokertest.PulsarURL(), "--id", topic, "-t", topic)
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1", "VIRTUAL_ENV="+v)
	runPythonService(t, "the streaming service", cmd, topic, 5*time.Second, 45*time.Second)
}

// runPythonService starts cmd, a Python tool service named name in the
// log, its output kept for the test's log on failure, and returns once it
// has subscribed to topic's requests (within subscribed). At the end of
// the test it is sent SIGTERM, and killed if it has not exited within
// stopWait.
func runPythonService(t *testing.T, name string, cmd *exec.Cmd, topic string, stopWait, subscribed time.Duration) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "service.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	err = cmd.Start()
	logFile.Close()
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(stopWait):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s output:\n%.4000s", name, b)
		}
	})
	eventually.True(t, subscribed, name+" subscribed", func() bool {
		select {
		case <-done:
			t.Fatalf("%s exited before subscribing", name)
		default:
		}
		return brokertest.Subscriptions("non-persistent://tg/request/"+topic) > 0
	})
}

// TestChunkedUnaryBurstPython: the same burst from a Python service that
// neither numbers its replies nor waits for credit, on a non-persistent
// response topic. The broker may drop what the gateway cannot take at
// once; then the calls of that topic end REPLY_LOST, as soon as the
// broker's counters show it. Every call ends whole or REPLY_LOST — none
// with a hole, none at its deadline.
func TestChunkedUnaryBurstPython(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Fatalf("the Pulsar broker is required: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
	topic := brokertest.UniqueTopic("burst-py")
	regPath := filepath.Join(t.TempDir(), "registry.yaml")
	reg := fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, description: echo, service: echo-service}\n", topic)
	if err := os.WriteFile(regPath, []byte(reg), 0o644); err != nil {
		t.Fatal(err)
	}
	startPythonStreams(t, topic)
	g := startGateway(t, regPath, brokertest.UniqueTopic("gw-burst-py"))
	const deadline = 120 * time.Second
	start := time.Now()
	results := make([]string, chunkedCalls)
	ended := make([]time.Duration, chunkedCalls)
	var wg sync.WaitGroup
	for i := range chunkedCalls {
		wg.Go(func() {
			results[i] = chunkedUnary(t.Context(), g, i%2 == 0, chunkedChunks, deadline)
			ended[i] = time.Since(start)
		})
	}
	wg.Wait()
	counts := map[string]int{}
	var last time.Duration
	for i, r := range results {
		switch {
		case r == "whole":
			counts["whole"]++
		case strings.Contains(r, "REPLY_LOST") || strings.Contains(r, "dropped"):
			counts["REPLY_LOST"]++
			if counts["REPLY_LOST"] == 1 {
				t.Logf("call %d ended after %v: %.400s", i, ended[i].Round(time.Millisecond), r)
			}
		default:
			counts["other"]++
			t.Errorf("call %d ended after %v: %.300s; want whole or REPLY_LOST", i, ended[i].Round(time.Millisecond), r)
		}
		last = max(last, ended[i])
	}
	t.Logf("%d calls × %d chunks from the Python service: %v; the last ended after %v", chunkedCalls, chunkedChunks, counts, last.Round(time.Millisecond))
	if last >= deadline {
		t.Errorf("a call ran to its deadline")
	}
}
