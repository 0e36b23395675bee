package e2e

import (
	"context"
	"github.com/toolgate/toolgate/internal/brokertest"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func contextWithTimeout(t *testing.T, ms int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), time.Duration(ms)*time.Millisecond)
}

// freeAddr returns a 127.0.0.1 address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	return brokertest.FreeAddr(t)
}

// metric is the sum of every series of the Prometheus metric name (all
// label values) on the gateway at base's /metrics; 0 when none is there.
func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d %v", resp.StatusCode, err)
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}
