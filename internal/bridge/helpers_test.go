package bridge_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// waitSubscribed waits until topic has a subscriber, or the service failed.
func waitSubscribed(t *testing.T, br transport.Broker, topic string, failed <-chan error) {
	t.Helper()
	eventually.True(t, 20*time.Second, "a subscriber on "+topic, func() bool {
		select {
		case err := <-failed:
			t.Fatalf("tool service stopped: %v", err)
		default:
		}
		return brokertest.Subscribed(br, topic)
	})
}
