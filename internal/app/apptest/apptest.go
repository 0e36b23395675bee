// Package apptest runs the gateway inside a test's process: the production
// composition root (internal/app) built from the flags a test gives, on
// free loopback ports, against the test broker, stopped when the test ends.
// It is the one way tests start a gateway in process.
package apptest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/eventually"
)

// defaults come before a test's own flags, which win over them: free
// loopback ports (the admin listener's too) and the test broker.
func defaults() []string {
	return []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--pulsar-url", brokertest.PulsarURL()}
}

// Gateway is a gateway running in the test's process.
type Gateway struct {
	*app.Gateway
	stop func() error
}

// Start builds a gateway from args (after the defaults) and runs it until
// Stop or the end of the test; an error from its run fails the test. A nil
// log discards the gateway's log.
func Start(t testing.TB, log *slog.Logger, args ...string) *Gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	gw, done, err := Run(ctx, log, args...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	g := &Gateway{Gateway: gw}
	g.stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := g.stop(); err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	return g
}

// Stop ends the gateway as SIGTERM would and returns what its run
// returned; later calls return the same.
func (g *Gateway) Stop() error { return g.stop() }

// WaitReady waits until /readyz answers 200, at most d.
func (g *Gateway) WaitReady(t testing.TB, d time.Duration) {
	t.Helper()
	url := "http://" + g.HTTPAddr() + "/readyz"
	eventually.True(t, d, "the gateway ready ("+url+")", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// Run builds a gateway from args (after the defaults) and runs it until
// ctx ends; what its run returns arrives on the channel. It is
// Start for callers without a test, such as TestMain.
func Run(ctx context.Context, log *slog.Logger, args ...string) (*app.Gateway, <-chan error, error) {
	cfg, err := config.Parse(append(defaults(), args...), func(string) string { return "" }, os.Stderr)
	if err != nil {
		return nil, nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	gw, err := app.New(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	return gw, done, nil
}
