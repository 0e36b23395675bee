package e2e

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/config"
)

// runGateway starts a gateway of the test's own — listeners on free
// loopback ports and the test broker, then args — and stops it when the
// test ends, failing the test if it did not stop cleanly. log nil
// discards its log.
func runGateway(t *testing.T, log *slog.Logger, args ...string) *app.Gateway {
	t.Helper()
	all := append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--pulsar-url", brokertest.PulsarURL()}, args...)
	cfg, err := config.Parse(all, func(string) string { return "" }, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	gw, err := app.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	return gw
}
