package scale

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
)

// startPythonSDKEcho runs the Python SDK's example echo service
// (sdk/python/examples/echo.py, the SDK from the checkout) on topic, not
// announcing, until the test ends; it returns once it has subscribed.
func startPythonSDKEcho(t *testing.T, topic string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(venv(t), "bin", "python"), filepath.Join(repoRoot(t), "sdk", "python", "examples", "echo.py"),
		"--pulsar-url", brokertest.PulsarURL(), "--id", topic, "--topic", topic, "--no-announce", "--concurrency", "256")
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1", "PYTHONPATH="+filepath.Join(repoRoot(t), "sdk", "python", "src"))
	runPythonService(t, "echo.py", cmd, topic, 15*time.Second, 60*time.Second)
}

// TestChunkedUnaryBurstPythonSDK: TestChunkedUnaryBurst's 200 unary calls
// at once, each answered in 2,000 chunks, from the Python SDK's echo
// service, which numbers its chunks and honours the gateway's credit as
// the Go SDK does: every answer whole, none lost (where a Python service
// without flow control loses some, TestChunkedUnaryBurstPython).
func TestChunkedUnaryBurstPythonSDK(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Fatalf("the Pulsar broker is required: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
	topic := brokertest.UniqueTopic("burst-pysdk")
	regPath := filepath.Join(t.TempDir(), "registry.yaml")
	// The service has two tools: the descriptor names echo (its config value toolgate-tool).
	reg := fmt.Sprintf("tool-service:\n  echo-service: {topic: %s, config-params: [{name: toolgate-tool}]}\n"+
		"tool:\n  echo: {type: tool-service, description: echo, service: echo-service, toolgate-tool: echo}\n", topic)
	if err := os.WriteFile(regPath, []byte(reg), 0o644); err != nil {
		t.Fatal(err)
	}
	startPythonSDKEcho(t, topic)
	g := startGateway(t, regPath, brokertest.UniqueTopic("gw-burst-pysdk"))
	start := time.Now()
	results := make([]string, chunkedCalls)
	var wg sync.WaitGroup
	for i := range chunkedCalls {
		wg.Go(func() { results[i] = chunkedUnary(t.Context(), g, i%2 == 0, chunkedChunks, 120*time.Second) })
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
	took := time.Since(start)
	t.Logf("%d calls × %d chunks from the Python SDK's echo in %v (%.0f chunks/s): %v", chunkedCalls, chunkedChunks,
		took.Round(time.Millisecond), float64(chunkedCalls*chunkedChunks)/took.Seconds(), counts)
	if n := counts["REST: whole"] + counts["gRPC: whole"]; n != chunkedCalls {
		t.Errorf("%d of %d calls answered whole", n, chunkedCalls)
	}
}
