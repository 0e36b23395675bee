package quota

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/redistest"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRedisTimeoutHonoured: a call under quota waits no longer than the
// store's timeout (+ 50 ms) to learn that Redis cannot be asked — when
// nobody listens on its port (each dial refused) and when a listener
// takes connections and never answers — one call at a time, and 60 at
// once (more than the client's pool holds).
func TestRedisTimeoutHonoured(t *testing.T) {
	t.Parallel()
	const (
		timeout = DefaultRedisTimeout
		bound   = timeout + 50*time.Millisecond
	)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	for name, url := range map[string]string{
		"refused": redistest.Refused(t),
		"silent":  "redis://" + silent.Addr().String(),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, err := NewRedis(url, timeout)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			rules := mustRules(t, `rules: [{name: both, users: ["*"], tools: ["*"], calls: 100, per: minute, concurrent: 3}]`)
			h := NewEnforcer(rules, store, WithFailClosed(true)).Middleware()(ok)
			one := func() time.Duration {
				start := time.Now()
				_, err := h(context.Background(), call(caller("alice"), toolcall.OpInvoke, "search"), nil)
				took := time.Since(start)
				if status.Code(err) != codes.Unavailable {
					t.Errorf("a call with Redis %s: %v, want UNAVAILABLE (fail closed)", name, err)
				}
				return took
			}
			var slowest time.Duration
			for range 10 {
				slowest = max(slowest, one())
			}
			t.Logf("one at a time: the slowest call took %v", slowest)
			if slowest > bound {
				t.Errorf("one at a time, with Redis %s: a call took %v, want at most %v (timeout %v)", name, slowest, bound, timeout)
			}
			var mu sync.Mutex
			slowest = 0
			var wg sync.WaitGroup
			for range 60 {
				wg.Go(func() {
					took := one()
					mu.Lock()
					slowest = max(slowest, took)
					mu.Unlock()
				})
			}
			wg.Wait()
			t.Logf("60 at once: the slowest call took %v", slowest)
			if slowest > bound {
				t.Errorf("60 at once, with Redis %s: a call took %v, want at most %v (timeout %v)", name, slowest, bound, timeout)
			}
		})
	}
}
