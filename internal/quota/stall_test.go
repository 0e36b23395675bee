package quota

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/randid"
	"github.com/toolgate/toolgate/internal/redistest"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRedisStall: Redis stops answering for 10 s (SIGSTOP) while four
// callers keep all three of their slots busy with short calls. Releases
// fail meanwhile, and the takes written to the sockets before the stall
// run when Redis resumes, with nobody left to release them. Every caller
// must have its full budget again within two leases of Redis's return.
func TestRedisStall(t *testing.T) {
	t.Parallel()
	const (
		budget  = 3
		timeout = DefaultRedisTimeout
		stall   = 10 * time.Second
		recover = 2 * DefaultSlotLease
	)
	srv := redistest.Start(t)
	store, err := NewRedis(srv.URL, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	rules := mustRules(t, `rules: [{name: at-once, users: ["*"], tools: ["*"], concurrent: 3}]`)
	// As the gateway has it: --max-timeout (10 min) + 30 s.
	e := NewEnforcer(rules, store, WithLease(DefaultMaxHold))
	h := e.Middleware()(func(ctx context.Context, _ *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		// the tool's own work
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
		}
		return toolcall.Result{Output: "ok"}, nil
	})
	callers := []toolcall.Caller{caller("alice"), caller("bob"), caller("carol"), caller("dave")}

	var (
		stalled           atomic.Bool
		admitted, refused atomic.Int64
		slowest           atomic.Int64 // the longest a call waited for its quota during the stall, ns
		stop              = make(chan struct{})
		workers           sync.WaitGroup
	)
	for _, c := range callers {
		for range budget {
			workers.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					_, err := h(context.Background(), call(c, toolcall.OpInvoke, "search"), nil)
					took := time.Since(start)
					switch status.Code(err) {
					case codes.OK:
						admitted.Add(1)
					case codes.ResourceExhausted:
						refused.Add(1)
					default:
						t.Errorf("%s: %v", c.User, err)
					}
					if stalled.Load() {
						for {
							s := slowest.Load()
							if int64(took) <= s || slowest.CompareAndSwap(s, int64(took)) {
								break
							}
						}
					}
				}
			})
		}
	}
	eventually.True(t, 30*time.Second, "100 calls admitted with Redis up", func() bool { return admitted.Load() >= 100 })
	if n := refused.Load(); n != 0 {
		t.Fatalf("with Redis up, %d calls of callers within their budget were refused", n)
	}

	srv.Pause(t)
	stalled.Store(true)
	before := admitted.Load()
	<-time.After(stall) // Redis stalls this long under the load
	stalled.Store(false)
	srv.Resume(t)
	resumed := time.Now()
	close(stop)
	workers.Wait()
	t.Logf("during the %v stall: %d calls let through; the slowest waited %v for its quota (timeout %v)",
		stall, admitted.Load()-before, time.Duration(slowest.Load()), timeout)
	if w := time.Duration(slowest.Load()); w > timeout+50*time.Millisecond {
		t.Errorf("during the stall a call waited %v for its quota, want at most the timeout (%v) + 50 ms", w, timeout)
	}

	// A caller has its full budget when budget calls at once are admitted.
	full := func(c toolcall.Caller) bool {
		tk, h, _ := e.take(c.Key(), rules.matching(c, "search"))
		var held []Held
		defer func() { _ = store.Release(context.Background(), held) }()
		for range budget {
			tk.Lease = randid.New()
			d, err := store.Take(t.Context(), tk)
			if err != nil || !d.OK {
				return false
			}
			held = append(held, Held{Lease: tk.Lease, Keys: h.Keys})
		}
		return true
	}
	eventually.True(t, recover, "every caller has its full budget again", func() bool {
		for _, c := range callers {
			if !full(c) {
				return false
			}
		}
		return true
	})
	t.Logf("every caller had its full budget %v after Redis resumed", time.Since(resumed))
}
