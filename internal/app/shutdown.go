package app

// The end of a gateway: the drain, the servers closed, then the broker's
// side — bounded in time whatever the broker does.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
)

// Bounds of the end of a shutdown, after the grace: for the calls ended
// then to send their answers, and for the servers to close. The whole
// shutdown takes at most the grace and shutdownMargin: what has not closed
// by then — the broker away, a close waits for it — is abandoned.
const (
	endCallsWait   = 2 * time.Second
	closeWait      = time.Second
	shutdownMargin = 4 * time.Second
	// closeEarlyWait bounds closing what New had started when it fails.
	closeEarlyWait = 5 * time.Second
	// tracesWait bounds flushing the traces at the end.
	tracesWait = 5 * time.Second
)

// ErrAbandoned is what Run returns (wrapped, with what was left) when the
// shutdown reached its deadline before everything had closed — the
// broker's subscriptions, producers, the operations' records not written,
// the registry's readers: their closes wait for a broker that does not
// answer. The gateway has stopped all the same; the command exits with
// status 3.
var ErrAbandoned = errors.New("stopped, abandoning what had not closed by the shutdown's deadline")

// tasks are the gateway's goroutines that run until its shutdown, by
// name, so that one that does not end in time can be named.
type tasks struct {
	mu      sync.Mutex
	running map[string]int
	wg      sync.WaitGroup
}

// Go runs f as task name.
func (t *tasks) Go(name string, f func()) {
	t.mu.Lock()
	if t.running == nil {
		t.running = map[string]int{}
	}
	t.running[name]++
	t.mu.Unlock()
	t.wg.Go(func() {
		defer func() {
			t.mu.Lock()
			if t.running[name]--; t.running[name] == 0 {
				delete(t.running, name)
			}
			t.mu.Unlock()
		}()
		f()
	})
}

// wait waits until every task has returned or ctx ends, and returns the
// names of those still running.
func (t *tasks) wait(ctx context.Context) []string {
	if !within(ctx, t.wg.Wait) {
		t.mu.Lock()
		defer t.mu.Unlock()
		left := make([]string, 0, len(t.running))
		for name := range t.running {
			left = append(left, name)
		}
		slices.Sort(left)
		return left
	}
	return nil
}

// within runs f on a goroutine of its own and reports whether it returned
// before ctx ended; if not, it is left running.
func within(ctx context.Context, f func()) bool {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// abandoned is what a shutdown left behind when its deadline came.
type abandoned struct {
	calls    int64             // calls still running
	tasks    []string          // the gateway's own goroutines still running
	registry []string          // registry sources still reading, and their client
	broker   pulsarbroker.Left // subscriptions, readers, producers, the client
	unsent   int64             // operations' records and chunks being written
	bridge   bool              // the bridge's subscriptions still closing
	traces   bool              // the traces were not flushed
	servers  []string          // servers that did not close
}

// add adds to a what b says was left.
func (a *abandoned) add(b abandoned) {
	a.calls += b.calls
	a.tasks = append(a.tasks, b.tasks...)
	a.registry = append(a.registry, b.registry...)
	if !b.broker.Empty() {
		a.broker = b.broker
	}
	a.unsent += b.unsent
	a.bridge = a.bridge || b.bridge
	a.traces = a.traces || b.traces
	a.servers = append(a.servers, b.servers...)
}

func (a *abandoned) empty() bool {
	return a.calls == 0 && len(a.tasks) == 0 && len(a.registry) == 0 && a.broker.Empty() && a.unsent == 0 &&
		!a.bridge && !a.traces && len(a.servers) == 0
}

// attrs are a's log attributes: only what was left.
func (a *abandoned) attrs() []any {
	var as []any
	add := func(k string, v any, ok bool) {
		if ok {
			as = append(as, k, v)
		}
	}
	add("subscriptions", a.broker.Subscriptions, len(a.broker.Subscriptions) > 0)
	add("producers", a.broker.Producers, len(a.broker.Producers) > 0)
	add("queued_messages", a.broker.Queued, a.broker.Queued > 0)
	add("unsent_records", a.unsent, a.unsent > 0)
	add("registry", a.registry, len(a.registry) > 0)
	add("pulsar_client", true, a.broker.Client)
	add("bridge_closing", true, a.bridge)
	add("tasks", a.tasks, len(a.tasks) > 0)
	add("calls", a.calls, a.calls > 0)
	add("servers", a.servers, len(a.servers) > 0)
	add("traces_unflushed", true, a.traces)
	return as
}

// String tells what was left, in a few words.
func (a *abandoned) String() string {
	var parts []string
	count := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	count(len(a.broker.Subscriptions), "subscription(s)")
	count(len(a.broker.Producers), "producer(s)")
	count(int(a.unsent), "operation record(s) not written")
	count(len(a.registry), "registry source(s) or client")
	count(len(a.tasks), "task(s)")
	count(int(a.calls), "call(s)")
	count(len(a.servers), "server(s)")
	if a.broker.Client {
		parts = append(parts, "the Pulsar client")
	}
	if a.bridge {
		parts = append(parts, "the bridge's subscriptions")
	}
	if a.traces {
		parts = append(parts, "unflushed traces")
	}
	return strings.Join(parts, ", ")
}

// shutdown drains: /readyz turns 503 and gRPC health NOT_SERVING, new
// calls are refused with UNAVAILABLE and a RetryInfo, and the listeners
// stay open while the calls in flight get cfg.ShutdownGrace to finish.
// Calls still running then are ended with UNAVAILABLE and a RetryInfo
// (streams too) and given endCallsWait to send it; then the servers close
// (the public ports are free from here on), and then the broker's side:
// the registry's sources, the bridge, the operations, the gateway's
// tasks, the broker client's producers and subscriptions and the client,
// each on a goroutine of its own. All of it within the grace and
// shutdownMargin from the start, computed once: what has not closed then
// is abandoned, logged once, and the error returned wraps ErrAbandoned.
func (g *Gateway) shutdown(bg *tasks) error {
	start := time.Now()
	deadline := start.Add(g.cfg.ShutdownGrace + shutdownMargin)
	g.stopping.Store(true) // /readyz turns not-ready at once
	g.drain.closing.Store(true)
	g.health.Shutdown()
	g.httpSrv.SetKeepAlivesEnabled(false) // clients reconnect elsewhere
	g.log.Info("shutting down: refusing new calls, letting calls in flight finish", "grace", g.cfg.ShutdownGrace,
		"in_flight", g.drain.running.Load(), "stops_within", deadline.Sub(start))
	var left abandoned
	grace, endGrace := context.WithDeadline(context.Background(), start.Add(g.cfg.ShutdownGrace))
	defer endGrace()
	var bridgeClosed <-chan struct{}
	if !g.drain.wait(grace) {
		g.log.Warn("calls still running after the grace period; ending them with UNAVAILABLE", "calls", g.drain.running.Load())
		// Calls waiting for replies end with ErrClosed at once
		// (UNAVAILABLE, RetryInfo); closing the bridge's subscriptions,
		// which waits for the broker, goes on meanwhile.
		bridgeClosed = g.closeBridge()
		end, endWait := context.WithTimeout(context.Background(), endCallsWait)
		if !g.drain.wait(end) {
			g.log.Warn("calls still running after they were ended; closing their connections", "calls", g.drain.running.Load())
		}
		endWait()
	}
	g.stopHTTPBase()
	left.servers = g.closeServers()

	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if bridgeClosed == nil {
		bridgeClosed = g.closeBridge()
	}
	var wg sync.WaitGroup
	wg.Go(func() { left.registry = leftBy(g.closing.sources.run(ctx)).registry })
	wg.Go(func() {
		// The bridge's subscriptions and the tasks' (the operations'
		// consumer and readers) closed by their owners first, then what
		// the broker client still has open, and the client.
		select {
		case <-bridgeClosed:
		case <-ctx.Done():
		}
		left.tasks = bg.wait(ctx)
		left.broker = leftBy(g.closing.broker.run(ctx)).broker
		select {
		case <-bridgeClosed:
		default:
			left.bridge = true
		}
		if g.ops != nil {
			left.unsent = g.ops.Unsent()
		}
	})
	wg.Wait()
	if !g.drain.wait(ctx) { // handlers whose connections were closed under them
		left.calls = g.drain.running.Load()
	}
	// The admin listener goes last: metrics and readiness answer through
	// the drain.
	if g.adminSrv != nil {
		actx, acancel := context.WithDeadline(context.Background(), earliest(time.Now().Add(closeWait), deadline))
		if err := g.adminSrv.Shutdown(actx); err != nil {
			_ = g.adminSrv.Close()
		}
		acancel()
	}
	tctx, tcancel := context.WithDeadline(context.Background(), earliest(time.Now().Add(tracesWait), deadline))
	defer tcancel()
	if err := g.closing.traces.run(tctx); err != nil {
		left.traces = errors.Is(err, context.DeadlineExceeded)
		g.log.Warn("flushing traces", "err", err)
	}
	if left.empty() {
		g.log.Info("gateway stopped", "took", time.Since(start).Round(time.Millisecond))
		return nil
	}
	// Once, with all of it: the broker's client would say it again and
	// again.
	g.log.Warn("gateway stopped at its shutdown deadline, abandoning what had not closed: the broker does not answer",
		append([]any{"took", time.Since(start).Round(time.Millisecond)}, left.attrs()...)...)
	return fmt.Errorf("%w: %s", ErrAbandoned, left.String())
}

// closeBridge closes the bridge on a goroutine of its own: the calls
// waiting end at once, its subscriptions close as the broker lets them.
// The channel is closed once it has returned.
func (g *Gateway) closeBridge() <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); _ = g.closing.bridge.run(context.Background()) }()
	return done
}

// closeServers closes the gRPC and HTTP servers, each within closeWait
// (the HTTP server is closed at once past it; gRPC's Stop gets another),
// and returns those that did not close.
func (g *Gateway) closeServers() []string {
	var wg sync.WaitGroup
	var grpcLeft bool
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		defer cancel()
		if err := g.httpSrv.Shutdown(ctx); err != nil {
			_ = g.httpSrv.Close()
		}
	})
	wg.Go(func() {
		done := make(chan struct{})
		go func() { g.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(closeWait): // health watches, calls that would not end
			g.grpcSrv.Stop()
			select {
			case <-done:
			case <-time.After(closeWait):
				grpcLeft = true
			}
		}
	})
	wg.Wait()
	if grpcLeft {
		return []string{"gRPC"}
	}
	return nil
}

// closeBroker closes the gateway's broker client within ctx and returns
// what it left open.
func (g *Gateway) closeBroker(ctx context.Context) pulsarbroker.Left {
	if c, ok := g.broker.(interface {
		CloseWithin(context.Context) pulsarbroker.Left
	}); ok {
		return c.CloseWithin(ctx)
	}
	if !within(ctx, g.broker.Close) {
		return pulsarbroker.Left{Client: true}
	}
	return pulsarbroker.Left{}
}

// closeEarly closes what New had opened when a later step fails: the
// stack of its steps' closings unwound, the last opened first, within
// closeEarlyWait.
func (g *Gateway) closeEarly() {
	ctx, cancel := context.WithTimeout(context.Background(), closeEarlyWait)
	defer cancel()
	var left abandoned
	for _, err := range g.closers.unwind(ctx) {
		if lo := (*leftOpen)(nil); errors.As(err, &lo) {
			left.add(lo.left)
			continue
		}
		g.log.Warn("closing what the gateway had opened", "err", err)
	}
	if !left.empty() {
		g.log.Warn("abandoning what had not closed: the broker does not answer", left.attrs()...)
	}
}

// closeRest closes, at the end of Run, what New opened and the shutdown
// has not closed at its own time — the audit log (its last lines: the
// calls are over), the quotas' and the idempotency keys' stores — the last
// opened first, within auditCloseWait.
func (g *Gateway) closeRest() {
	ctx, cancel := context.WithTimeout(context.Background(), auditCloseWait)
	defer cancel()
	for _, err := range g.closers.unwind(ctx) {
		g.log.Error("closing what the gateway had opened", "err", err)
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
