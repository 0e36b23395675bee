package brokertest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Runner is a tool service of the Go SDK (toolservice.Service) as
// RunService sees it.
type Runner interface {
	Run(ctx context.Context) error
	Ready() <-chan struct{}
}

// RunService runs svc until the test ends; the test fails when Run ends
// with an error. With wait > 0 it first waits that long for svc to be
// ready (subscribed), and fails the test at once when it is not. stop ends
// svc earlier, waiting for Run to return; calling it again does nothing.
func RunService(tb testing.TB, name string, svc Runner, wait time.Duration) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("tool service %s: %v", name, err)
		}
	})
	tb.Cleanup(stop)
	if wait <= 0 {
		return stop
	}
	select {
	case <-svc.Ready():
	case err := <-done:
		done <- err // for stop
		tb.Fatalf("tool service %s ended before it was ready: %v", name, err)
	case <-time.After(wait):
		tb.Fatalf("tool service %s not ready (subscribed) after %v", name, wait)
	}
	return stop
}
