package quota

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/redistest"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// holding runs calls through e that hold their slots until released, and
// reports when each has been let in.
func holding(e *Enforcer) (h toolcall.Handler, in <-chan struct{}, release chan<- struct{}) {
	admitted, gate := make(chan struct{}, 16), make(chan struct{})
	return e.Middleware()(func(ctx context.Context, _ *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		admitted <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return toolcall.Result{}, nil
	}), admitted, gate
}

// uniqueRules is a rule of one slot for every caller, named afresh so
// that runs never share keys in the shared Redis.
func uniqueRules(t *testing.T) *Rules {
	t.Helper()
	return mustRules(t, `rules: [{name: one-`+strings.ReplaceAll(key("x"), ":", "-")+`, users: ["*"], tools: ["*"], concurrent: 1}]`)
}

// TestSlotHeldWhileCallRuns: a call keeps its slot for as long as it
// runs — many times its slot lease, its heartbeat renewing it — and gives
// it back when it ends.
func TestSlotHeldWhileCallRuns(t *testing.T) {
	t.Parallel()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const lease = 300 * time.Millisecond
			e := NewEnforcer(uniqueRules(t), s, WithSlotLease(lease))
			long, in, release := holding(e)
			h := e.Middleware()(ok)
			done := make(chan error, 1)
			go func() { _, err := long(t.Context(), call(caller("alice"), toolcall.OpStream, "t"), nil); done <- err }()
			<-in
			start := time.Now()
			eventually.True(t, 30*time.Second, "5 slot leases pass with the call running", func() bool {
				if _, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "t"), nil); status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("a second call %v into the first (slot lease %v): %v, want RESOURCE_EXHAUSTED", time.Since(start), lease, err)
				}
				return time.Since(start) > 5*lease
			})
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if _, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "t"), nil); err != nil {
				t.Fatalf("once the long call ended: %v", err)
			}
		})
	}
}

// TestSlotHeldAtMostMaxHold: a call that outruns WithLease (the gateway's
// --max-timeout + 30 s) has its slot renewed no more: it lapses within a
// slot lease, though the call still runs.
func TestSlotHeldAtMostMaxHold(t *testing.T) {
	t.Parallel()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const lease, maxHold = 300 * time.Millisecond, time.Second
			e := NewEnforcer(uniqueRules(t), s, WithSlotLease(lease), WithLease(maxHold))
			long, in, release := holding(e)
			defer close(release)
			go func() { _, _ = long(t.Context(), call(caller("alice"), toolcall.OpStream, "t"), nil) }()
			<-in
			start := time.Now()
			h := e.Middleware()(ok)
			eventually.True(t, 30*time.Second, "a second call admitted once the first held its slot too long", func() bool {
				_, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "t"), nil)
				if err == nil && time.Since(start) < maxHold-lease {
					t.Fatalf("a second call admitted %v into the first (longest hold %v)", time.Since(start), maxHold)
				}
				return err == nil
			})
			if took := time.Since(start); took > maxHold+2*lease {
				t.Errorf("the slot was held %v, want at most %v + a slot lease (%v)", took, maxHold, lease)
			}
		})
	}
}

// pausedRedis is an Enforcer over a Redis of the test's own, with a
// slot lease of a minute: what a test sees freed sooner was released,
// not lapsed.
func pausedRedis(t *testing.T) (*redistest.Server, *Enforcer) {
	t.Helper()
	srv := redistest.Start(t)
	store, err := NewRedis(srv.URL, DefaultRedisTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return srv, NewEnforcer(uniqueRules(t), store, WithSlotLease(time.Minute))
}

// TestReleaseRetried: a call that ends while Redis is stalled cannot
// release its slot then; its release is retried, and the slot is free
// as soon as Redis is back — not a slot lease later. (A release written
// to a connection before the stall would run when Redis resumes: here
// the pooled connection is gone, as under load, and the release's new
// connection never gets past its handshake.)
func TestReleaseRetried(t *testing.T) {
	t.Parallel()
	srv, e := pausedRedis(t)
	long, in, release := holding(e)
	done := make(chan error, 1)
	go func() { _, err := long(t.Context(), call(caller("alice"), toolcall.OpStream, "t"), nil); done <- err }()
	<-in
	srv.Pause(t)
	// The ping times out on the pooled connection, which go-redis closes.
	if err := e.store.(*Redis).Ping(t.Context()); err == nil {
		t.Fatal("a ping answered with Redis stalled")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if testutil.ToFloat64(e.storeErrors) != 1 || e.leases.Pending() != 1 {
		t.Fatalf("store errors %v, releases pending %d: want the failed release counted and pending",
			testutil.ToFloat64(e.storeErrors), e.leases.Pending())
	}
	srv.Resume(t)
	resumed := time.Now()
	h := e.Middleware()(ok)
	eventually.True(t, 10*time.Second, "the slot free once Redis resumed", func() bool {
		_, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "t"), nil)
		return err == nil
	})
	t.Logf("the slot was free %v after Redis resumed", time.Since(resumed))
	eventually.True(t, 10*time.Second, "no release pending", func() bool { return e.leases.Pending() == 0 })
}

// TestStaleTakeGivenBack: a take written to Redis while it is stalled
// gets no answer in time — the call goes on unchecked (fail open) or is
// refused (fail closed) — and runs when Redis resumes. Its slot must not
// stay taken: it is given back as soon as Redis answers again.
func TestStaleTakeGivenBack(t *testing.T) {
	t.Parallel()
	for _, closed := range []bool{false, true} {
		name := map[bool]string{false: "fail open", true: "fail closed"}[closed]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, e := pausedRedis(t)
			WithFailClosed(closed)(e)
			h := e.Middleware()(ok)
			// A call with Redis up leaves a connection in the pool: the
			// next take is written to it whole.
			if _, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "t"), nil); err != nil {
				t.Fatal(err)
			}
			srv.Pause(t)
			want := map[bool]codes.Code{false: codes.OK, true: codes.Unavailable}[closed]
			if _, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "t"), nil); status.Code(err) != want {
				t.Fatalf("with Redis stalled: %v, want %v", err, want)
			}
			srv.Resume(t)
			resumed := time.Now()
			eventually.True(t, 10*time.Second, "the stale take's slot given back once Redis resumed", func() bool {
				_, err := h(t.Context(), call(caller("alice"), toolcall.OpInvoke, "t"), nil)
				return err == nil
			})
			t.Logf("the slot was free %v after Redis resumed", time.Since(resumed))
		})
	}
}
