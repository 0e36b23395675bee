package e2e

import (
	"context"
	"fmt"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestSIGTERMDrainsCallsInFlight runs the real gateway binary, parks 200
// slow calls in it, sends SIGTERM, and expects every call to complete and
// the process to exit cleanly within the grace period.
func TestSIGTERMDrainsCallsInFlight(t *testing.T) {
	t.Parallel()
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
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	var logs strings.Builder
	cmd := exec.Command(bin, "--registry", reg, "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--pulsar-url", brokertest.PulsarURL(), "--allow-anonymous", "--shutdown-grace", "15s")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	if err := waitReady("http://"+httpAddr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
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
	time.Sleep(500 * time.Millisecond) // let the calls reach the service
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
	case <-time.After(20 * time.Second):
		t.Fatal("gateway still running 20 s after SIGTERM")
	}
	if d := time.Since(sent); d > 15*time.Second {
		t.Fatalf("shutdown took %v, longer than the grace period", d)
	}
	if !strings.Contains(logs.String(), "gateway stopped") {
		t.Fatalf("no clean stop in the log")
	}
}
