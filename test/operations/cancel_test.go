package operations_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/toolservice"
)

// TestOperationCancelReachesTheService: an operation started on gateway A
// (a process of its own, killed once the request runs) and cancelled on
// gateway B ends the handler's context within a few seconds: B tells the
// service on its cancel topic. Without that the handler would run its
// whole minute, A being gone.
func TestOperationCancelReachesTheService(t *testing.T) {
	running := make(chan string, 4)
	ended := make(chan string, 4)
	flags := setupWith(t, func(ctx context.Context, r *toolservice.Request) (any, error) {
		msg, _ := r.Arguments["msg"].(string)
		running <- msg
		select {
		case <-ctx.Done():
			ended <- msg
			return nil, ctx.Err()
		case <-time.After(60 * time.Second):
			return "not cancelled", nil
		}
	})
	a := startProcess(t, flags...)
	b := apptest.Start(t, nil, flags...)
	b.WaitReady(t, 60*time.Second)
	bBase := "http://" + b.HTTPAddr()

	msg := "cancel-me-" + brokertest.UniqueTopic("m")
	code, op := do(t, http.MethodPost, a.base+"/v1/tools/echo:start", aliceKey,
		fmt.Sprintf(`{"arguments": {"msg": %q}, "timeout": "120s"}`, msg))
	if code != http.StatusOK || op["done"] != false {
		t.Fatalf("start: %d %v", code, op)
	}
	id := strings.TrimPrefix(op["name"].(string), "operations/")
	select {
	case got := <-running:
		if got != msg {
			t.Fatalf("the handler runs %q, want %q", got, msg)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not start")
	}
	// A is gone: only B can tell the service.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	if code, e := do(t, http.MethodPost, bBase+"/v1/operations/"+id+":cancel", aliceKey, "{}"); code != http.StatusOK {
		t.Fatalf("cancel on B: %d %v", code, e)
	}
	cancelled := time.Now()
	select {
	case got := <-ended:
		if got != msg {
			t.Fatalf("the handler of %q ended, want %q", got, msg)
		}
		t.Logf("the handler's context ended %v after the cancel", time.Since(cancelled).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end within 5 s of the cancel on B")
	}
	code, got := do(t, http.MethodGet, bBase+"/v1/operations/"+id, aliceKey, "")
	if e, _ := got["error"].(map[string]any); code != http.StatusOK || got["done"] != true || e == nil || e["code"] != float64(1) {
		t.Fatalf("after the cancel B shows %d %v, want CANCELLED", code, got)
	}
}
