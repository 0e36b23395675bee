package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestSIGTERMDrainsCallsInFlight runs the real gateway binary, parks 200
// slow calls in it, sends SIGTERM, and expects every call to complete and
// the process to exit cleanly within the grace period.
func TestSIGTERMDrainsCallsInFlight(t *testing.T) {
	t.Parallel()
	gw := startGatewayProcess(t, "--shutdown-grace", "15s")
	grpcAddr, cmd, exited, logs := gw.grpcAddr, gw.cmd, gw.exited, gw.logs
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := toolgatev1.NewToolServiceClient(conn)

	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	started := make(chan struct{}, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprint(i)
			args, _ := structpb.NewStruct(map[string]any{"mode": "sleep", "ms": 2000.0, "msg": want})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			started <- struct{}{}
			r, err := client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args})
			if err == nil && r.GetOutput() != want {
				err = fmt.Errorf("got %q, want %q", r.GetOutput(), want)
			}
			errs <- err
		}()
	}
	for range n {
		<-started
	}
	eventually.True(t, 20*time.Second, "the calls published to the service", func() bool {
		return metric(t, "http://"+gw.adminAddr, "toolgate_bridge_published_total") >= n
	})
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	failed := 0
	var first error
	for err := range errs {
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d calls in flight were cut by the shutdown, e.g. %v", failed, n, first)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("gateway exited with %v", err)
		}
	case <-time.After(time.Until(sent.Add(15 * time.Second))):
		t.Fatal("gateway still running 15 s after SIGTERM, longer than the grace period")
	}
	if !strings.Contains(logs.String(), "gateway stopped") {
		t.Fatalf("no clean stop in the log")
	}
}

// gatewayProcess is the real gateway binary, run by a test.
type gatewayProcess struct {
	grpcAddr, httpAddr string
	adminAddr          string // /metrics, detailed /readyz
	cmd                *exec.Cmd
	exited             chan error
	logs               *strings.Builder
}

// startGatewayProcess builds and starts the gateway binary in front of the
// shared echo service (tool "echo"), with args added, and waits until it
// is ready. It is killed when the test ends, and its log shown if the
// test failed.
func startGatewayProcess(t *testing.T, args ...string) *gatewayProcess {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "gateway")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gateway")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	reg := filepath.Join(dir, "registry.yaml")
	if err := os.WriteFile(reg, []byte(reloadRegistry("echo")), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &gatewayProcess{grpcAddr: freeAddr(t), httpAddr: freeAddr(t), adminAddr: freeAddr(t), exited: make(chan error, 1), logs: &strings.Builder{}}
	p.cmd = exec.Command(bin, append([]string{"--registry", reg, "--grpc-addr", p.grpcAddr, "--http-addr", p.httpAddr, "--admin-addr", p.adminAddr,
		"--pulsar-url", brokertest.PulsarURL(), "--allow-anonymous", "--announcements=false"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("gateway log:\n%s", p.logs.String())
		}
	})
	if err := waitReady("http://"+p.httpAddr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSIGTERMPastTheGrace runs the real gateway binary with calls longer
// than its grace: during the drain /readyz answers 503 (the listener stays
// open) and new calls are refused with UNAVAILABLE and a RetryInfo; at the
// end of the grace the calls still running — unary and streams, REST and
// gRPC — end with UNAVAILABLE (SHUTTING_DOWN) and a RetryInfo (REST: in
// the JSON Status, and Retry-After on a unary answer), and the process
// exits.
func TestSIGTERMPastTheGrace(t *testing.T) {
	t.Parallel()
	const grace = 3 * time.Second
	gw := startGatewayProcess(t, "--shutdown-grace", grace.String())
	base := "http://" + gw.httpAddr
	conn, err := grpc.NewClient(gw.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := toolgatev1.NewToolServiceClient(conn)

	sleep := map[string]any{"mode": "sleep", "ms": 20000.0}
	stream := `{"arguments": {"mode": "stream", "n": 100000, "gap_ms": 50}}`
	calls := []func(chunked chan<- string) callEnd{
		func(chunked chan<- string) callEnd {
			chunked <- "REST unary (sent)"
			return restInvokeUntilEnd(t, base, "echo", `{"arguments": {"mode": "sleep", "ms": 20000}}`)
		},
		func(chunked chan<- string) callEnd { return restStreamUntilEnd(t, base, "echo", stream, "", chunked) },
		func(chunked chan<- string) callEnd {
			return restStreamUntilEnd(t, base, "echo", stream, "text/event-stream", chunked)
		},
		func(chunked chan<- string) callEnd { return grpcStreamUntilEnd(t, client, "echo", chunked) },
		func(chunked chan<- string) callEnd {
			chunked <- "gRPC unary (sent)"
			return grpcInvokeUntilEnd(t, client, "echo", sleep)
		},
	}
	chunked := make(chan string, len(calls))
	ends := make(chan callEnd, len(calls))
	for _, c := range calls {
		go func() { ends <- c(chunked) }()
	}
	for range calls {
		select {
		case <-chunked:
		case e := <-ends:
			t.Fatalf("%s ended before SIGTERM: %v %s %q", e.via, e.code, e.reason, e.msg)
		case <-time.After(20 * time.Second):
			t.Fatal("the calls were not under way after 20 s")
		}
	}
	eventually.True(t, 20*time.Second, "every call published to the service", func() bool {
		return metric(t, "http://"+gw.adminAddr, "toolgate_bridge_published_total") >= float64(len(calls))
	})
	sent := time.Now()
	if err := gw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	// The drain: /readyz is 503 every time it is asked, and the admin
	// listener's says why; new calls are refused, retryably.
	eventually.True(t, 2*time.Second, "/readyz 503 after SIGTERM", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	for time.Since(sent) < grace-500*time.Millisecond {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatalf("/readyz %v into the drain: %v", time.Since(sent).Round(time.Millisecond), err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("public /readyz during the drain: HTTP %d, want 503", resp.StatusCode)
		}
		if resp, err = http.Get("http://" + gw.adminAddr + "/readyz"); err != nil {
			t.Fatalf("admin /readyz %v into the drain: %v", time.Since(sent).Round(time.Millisecond), err)
		}
		var body struct {
			Details map[string]any `json:"details"`
		}
		derr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || derr != nil || body.Details["shutting_down"] != true {
			t.Fatalf("/readyz during the drain: HTTP %d %v (%v), want 503 with shutting_down", resp.StatusCode, body, derr)
		}
		time.Sleep(250 * time.Millisecond) //nolint:forbidigo // /readyz is sampled through the drain, four times a second
	}
	refused := []callEnd{
		restInvokeUntilEnd(t, base, "echo", `{"arguments": {"msg": "late"}}`),
		grpcInvokeUntilEnd(t, client, "echo", map[string]any{"msg": "late"}),
	}
	for _, e := range refused {
		e.via = "new " + e.via + " during the drain"
		checkRetryable(t, e)
	}

	for range calls {
		select {
		case e := <-ends:
			took := e.at.Sub(sent)
			t.Logf("%s: %v %s after %v: %s (RetryInfo %v, Retry-After %q)", e.via, e.code, e.reason, took.Round(time.Millisecond), e.msg, e.retry, e.retryAfter)
			checkRetryable(t, e)
			if e.at.Before(sent.Add(grace - 200*time.Millisecond)) {
				t.Errorf("%s ended %v after SIGTERM, before the grace (%v) was over", e.via, took, grace)
			}
		case <-time.After(grace + 10*time.Second):
			t.Fatal("calls still running 10 s after the grace")
		}
	}
	select {
	case err := <-gw.exited:
		if err != nil {
			t.Fatalf("gateway exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gateway still running 10 s after the calls ended")
	}
	t.Logf("gateway exited %v after SIGTERM (grace %v)", time.Since(sent).Round(time.Millisecond), grace)
}

// checkRetryable wants UNAVAILABLE SHUTTING_DOWN with a RetryInfo, and a
// Retry-After on a REST unary answer.
func checkRetryable(t *testing.T, e callEnd) {
	t.Helper()
	if e.code != codes.Unavailable || e.reason != "SHUTTING_DOWN" || !e.retry {
		t.Errorf("%s: %v %s %q (RetryInfo %v), want UNAVAILABLE SHUTTING_DOWN with a RetryInfo", e.via, e.code, e.reason, e.msg, e.retry)
	}
	if strings.Contains(e.via, "REST unary") && e.retryAfter == "" {
		t.Errorf("%s: no Retry-After header", e.via)
	}
}
