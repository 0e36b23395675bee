package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/wire"
)

// TestLoneStreamRate: a lone 100,000-chunk stream, directly over Pulsar
// and through the gateway (gRPC), alternately, TOOLGATE_LONE_STREAM_REPS
// times (default 3): the gateway's stream must arrive whole (the direct
// one, without flow control, may lose chunks: that pair has no ratio); the chunks per second
// and the ratio of each pair are logged (not asserted: the machine is
// shared), with their median.
func TestLoneStreamRate(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Fatalf("the Pulsar broker is required: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
	reps := 3
	if v, err := strconv.Atoi(os.Getenv("TOOLGATE_LONE_STREAM_REPS")); err == nil && v > 0 {
		reps = v
	}
	topic := brokertest.UniqueTopic("lone-echo")
	regPath := filepath.Join(t.TempDir(), "registry.yaml")
	reg := fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, description: echo, service: echo-service}\n", topic)
	if err := os.WriteFile(regPath, []byte(reg), 0o644); err != nil {
		t.Fatal(err)
	}
	startEcho(t, "lone-echo", topic)
	args := []string{"--default-timeout", "120s"}
	if w := os.Getenv("TOOLGATE_LONE_STREAM_WINDOW"); w != "" {
		args = append(args, "--stream-window", w)
	}
	g := startGateway(t, regPath, brokertest.UniqueTopic("gw-lone"), args...)
	var ratios []float64
	for i := range reps {
		direct := directLongStream(t, wire.RequestTopic(topic), longStream)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		gw := grpcLongStream(ctx, g.client, longStream, 0)
		cancel()
		t.Logf("rep %d: direct %.0f chunks/s (%s), gateway gRPC %.0f chunks/s (%s): %.2fx",
			i+1, direct.rate(), orWhole(direct.err), gw.rate(), orWhole(gw.err), gw.rate()/direct.rate())
		if gw.err != "" {
			t.Errorf("rep %d: the stream through the gateway was not whole: %s", i+1, gw.err)
			continue
		}
		if direct.err != "" {
			// The yardstick has no flow control: the broker drops what
			// its connection cannot take. No ratio for this pair.
			continue
		}
		ratios = append(ratios, gw.rate()/direct.rate())
	}
	if len(ratios) > 0 {
		slices.Sort(ratios)
		t.Logf("gateway ÷ direct over %d reps: median %.2fx, range %.2f–%.2fx", len(ratios), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
	}
}
