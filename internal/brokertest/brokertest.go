// Package brokertest gives tests the real Pulsar broker that `make test`
// starts: its URLs, a readiness check that fails (never skips) when the
// broker is missing, and unique topic names so tests do not see each
// other's traffic.
package brokertest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
)

// PulsarURL is the broker's binary URL (TOOLGATE_PULSAR_URL, default
// pulsar://127.0.0.1:6650).
func PulsarURL() string { return envOr("TOOLGATE_PULSAR_URL", transport.DefaultPulsarURL) }

// AdminURL is the broker's admin URL (TOOLGATE_PULSAR_ADMIN_URL, default
// http://127.0.0.1:8080).
func AdminURL() string { return envOr("TOOLGATE_PULSAR_ADMIN_URL", "http://127.0.0.1:8080") }

// WantPulsar reports whether tests that can run on both brokers should
// also run on Pulsar: when TOOLGATE_PULSAR_URL is set (make test sets it).
func WantPulsar() bool { return os.Getenv("TOOLGATE_PULSAR_URL") != "" }

// RequirePulsar fails the test when the broker is not ready. It never
// skips: a test that needs the broker and cannot have it has failed.
func RequirePulsar(tb testing.TB) {
	tb.Helper()
	if err := CheckPulsar(); err != nil {
		tb.Fatalf("the Pulsar broker is required and not ready: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
}

// CheckPulsar asks the admin API whether the broker is ready.
func CheckPulsar() error {
	resp, err := adminClient.Get(AdminURL() + "/admin/v2/brokers/ready")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/admin/v2/brokers/ready answered %s", AdminURL(), resp.Status)
	}
	return nil
}

// UniqueTopic returns prefix plus a random suffix.
func UniqueTopic(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// adminClient keeps no idle connections, so tests that check for goroutine
// leaks see none of its own.
var adminClient = &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// FreePorts picks n ports nothing listens on, below the kernel's ephemeral
// range (32768 up), so that no client connection takes one meanwhile: for
// brokers a test starts of its own.
func FreePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	for i := 0; len(ports) < n; i++ {
		if i == 1000 {
			tb.Fatalf("no %d free ports found between 20000 and 32000", n)
		}
		p := 20000 + mrand.IntN(12000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil || slices.Contains(ports, p) {
			continue
		}
		l.Close()
		ports = append(ports, p)
	}
	return ports
}

// FreeAddr is a 127.0.0.1 address nothing listens on, for a server a test
// starts in another process: its port is below the kernel's ephemeral
// range, where the port of a client connection made meanwhile could
// otherwise take it before the server binds it.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePorts(tb, 1)[0])
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
