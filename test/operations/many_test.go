package operations_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
)

// TestThousandOperationsOverThreeGateways: 1,000 operations started in turn
// on gateways A (a process), B and C, by alice and bob; midway A is killed
// with SIGKILL and B is stopped and started again. Every operation reaches
// done with its own output, read by its owner from a gateway that did not
// start it (the other caller gets NOT_FOUND); a cancel on C reaches the
// tool service of an operation A started; and once the TTL has passed, an
// operation is gone from every gateway.
func TestThousandOperationsOverThreeGateways(t *testing.T) {
	const n = 1000
	const ttl = 45 * time.Second
	var cancelled sync.Map // msg → true once the handler's context ended
	flags := setupService(t, 2*n, func(ctx context.Context, r *toolservice.Request) (any, error) {
		if r.Arguments["mode"] == "hold" {
			msg, _ := r.Arguments["msg"].(string)
			select {
			case <-ctx.Done():
				cancelled.Store(msg, true)
				return nil, ctx.Err()
			case <-time.After(60 * time.Second):
				return "not cancelled", nil
			}
		}
		return echo.Handle(ctx, r)
	})
	flags = append(flags, "--operation-ttl", ttl.String())
	a := startProcess(t, flags...)
	b := apptest.Start(t, nil, flags...)
	c := apptest.Start(t, nil, flags...)
	b.WaitReady(t, 60*time.Second)
	c.WaitReady(t, 60*time.Second)
	bBase, cBase := "http://"+b.HTTPAddr(), "http://"+c.HTTPAddr()

	type started struct {
		id, msg, key, other, by string
	}
	ops := make([]started, n)
	start := func(i int, base, by string) {
		key, other := aliceKey, bobKey
		if i%2 == 1 {
			key, other = bobKey, aliceKey
		}
		msg := fmt.Sprintf("op-%d-%d", i, time.Now().UnixNano())
		// 0.5 to 3 s each, so that many are running when A dies.
		code, op := do(t, http.MethodPost, base+"/v1/tools/echo:start", key,
			fmt.Sprintf(`{"arguments": {"mode": "sleep", "ms": %d, "msg": %q}, "timeout": "90s"}`, 500+(i*37)%2500, msg))
		if code != http.StatusOK || op["done"] != false {
			t.Errorf("start %d on %s: %d %v", i, by, code, op)
			return
		}
		ops[i] = started{id: strings.TrimPrefix(op["name"].(string), "operations/"), msg: msg, key: key, other: other, by: by}
	}
	// The first half on A, B and C in turn, 16 at a time.
	startRange := func(from, to int, gateways map[string]string, names []string) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := from; i < to; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				by := names[i%len(names)]
				start(i, gateways[by], by)
			}()
		}
		wg.Wait()
	}
	startRange(0, n/2, map[string]string{"A": a.base, "B": bBase, "C": cBase}, []string{"A", "B", "C"})
	if t.Failed() {
		t.FailNow()
	}
	// An operation of A's that only a cancel ends.
	_, hold := do(t, http.MethodPost, a.base+"/v1/tools/echo:start", aliceKey, `{"arguments": {"mode": "hold", "msg": "hold-me"}, "timeout": "90s"}`)
	holdID := strings.TrimPrefix(hold["name"].(string), "operations/")

	// A dies; B restarts.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	if err := b.Stop(); err != nil {
		t.Fatalf("stopping B: %v", err)
	}
	b2 := apptest.Start(t, nil, flags...)
	b2.WaitReady(t, 60*time.Second)
	b2Base := "http://" + b2.HTTPAddr()

	// The second half on B (again) and C.
	startRange(n/2, n, map[string]string{"B": b2Base, "C": cBase}, []string{"B", "C"})
	if t.Failed() {
		t.FailNow()
	}

	// The cancel, on C, reaches the service although A is gone.
	if code, e := do(t, http.MethodPost, cBase+"/v1/operations/"+holdID+":cancel", aliceKey, "{}"); code != http.StatusOK {
		t.Fatalf("cancel on C: %d %v", code, e)
	}
	eventually.True(t, 10*time.Second, "the cancel to reach the tool service", func() bool {
		_, ok := cancelled.Load("hold-me")
		return ok
	})

	// Each operation, read by its owner from a gateway that did not start it.
	readFrom := map[string]string{"A": cBase, "B": cBase, "C": b2Base}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, op := range ops {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			base := readFrom[op.by]
			var got map[string]any
			var code int
			eventually.Holds(60*time.Second, func() bool { // each :wait waits up to 10 s itself
				code, got = do(t, http.MethodPost, base+"/v1/operations/"+op.id+":wait", op.key, `{"timeout": "10s"}`)
				return code != http.StatusOK || got["done"] == true
			})
			if code != http.StatusOK {
				t.Errorf("operation %d (started on %s): wait: %d %v", i, op.by, code, got)
				return
			}
			resp, _ := got["response"].(map[string]any)
			if got["done"] != true || resp == nil || resp["output"] != op.msg {
				t.Errorf("operation %d (started on %s): %v, want done with %q", i, op.by, got, op.msg)
				return
			}
			if i%50 == 0 {
				if code, e := do(t, http.MethodGet, base+"/v1/operations/"+op.id, op.other, ""); code != http.StatusNotFound {
					t.Errorf("operation %d as the other caller: %d %v, want 404", i, code, e)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Past the TTL the first operation is gone from every gateway.
	first := ops[0]
	for _, base := range []string{b2Base, cBase} {
		eventually.True(t, ttl+30*time.Second, "operation 0 gone from "+base, func() bool {
			code, _ := do(t, http.MethodGet, base+"/v1/operations/"+first.id, first.key, "")
			return code == http.StatusNotFound
		})
	}
}
