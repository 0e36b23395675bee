package registry

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// buildEcho builds cmd/echo-service, the Go SDK's example service.
func buildEcho(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "echo-service")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/echo-service")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// replica is one echo-service process.
type replica struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *lockedLog
	lines  chan string // log lines, while someone waits for them
}

type lockedLog struct {
	mu sync.Mutex
	sb strings.Builder
}

func (l *lockedLog) add(s string) { l.mu.Lock(); l.sb.WriteString(s + "\n"); l.mu.Unlock() }
func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sb.String()
}

// startReplica starts an echo-service replica of service id on topic,
// announcing on annTopic, and waits until it has announced.
func startReplica(t *testing.T, bin, id, topic, annTopic string, extra ...string) *replica {
	t.Helper()
	args := append([]string{"--pulsar-url", brokertest.PulsarURL(), "--id", id, "--topic", topic,
		"--announce", "--announce-topic", annTopic}, extra...)
	r := &replica{cmd: exec.Command(bin, args...), exited: make(chan struct{}), log: &lockedLog{}, lines: make(chan string, 1024)}
	out, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.log.add(sc.Text())
			select {
			case r.lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(15 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() {
			t.Logf("replica %d log:\n%s", r.cmd.Process.Pid, r.log.String())
		}
	})
	r.waitLine(t, "msg=announced", 60*time.Second)
	return r
}

// waitLine waits for a log line containing s.
func (r *replica) waitLine(t *testing.T, s string, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case l := <-r.lines:
			if strings.Contains(l, s) {
				return
			}
		case <-r.exited:
			if strings.Contains(r.log.String(), s) {
				return
			}
			t.Fatalf("replica exited before logging %q:\n%s", s, r.log.String())
		case <-timer.C:
			t.Fatalf("replica did not log %q within %v:\n%s", s, d, r.log.String())
		}
	}
}

// stop sends sig and waits for the process to exit.
func (r *replica) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("replica did not exit within 60 s of %v", sig)
	}
}

// grpcGateway is a gateway in this process, reading announcements from
// annTopic, and a gRPC client of it.
type grpcGateway struct {
	*gateway
	client toolgatev1.ToolServiceClient
}

func startGRPCGateway(t *testing.T, annTopic string, extra ...string) *grpcGateway {
	t.Helper()
	args := append([]string{"--announcements", "--announce-topic", annTopic}, extra...)
	g := startGatewayWith(t, args...)
	g.waitReady(t, 60*time.Second)
	gw := &apptest.Gateway{Gateway: g.gw}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &grpcGateway{gateway: g, client: toolgatev1.NewToolServiceClient(conn)}
}

// listed reports whether the gateway lists tool name.
func (g *grpcGateway) listed(ctx context.Context, name string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := g.client.ListTools(ctx, &toolgatev1.ListToolsRequest{PageSize: 1000})
	if err != nil {
		return false, err
	}
	for _, tl := range resp.GetTools() {
		if tl.GetName() == name {
			return true, nil
		}
	}
	return false, nil
}

// invoke calls echo with msg through g; the reply must be msg.
func (g *grpcGateway) invoke(ctx context.Context, tool, msg string, timeout time.Duration) error {
	st, err := structpb.NewStruct(map[string]any{"msg": msg})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := g.client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: tool, Arguments: st})
	if err != nil {
		return err
	}
	if resp.GetOutput() != msg {
		return fmt.Errorf("echo %q answered %q", msg, resp.GetOutput())
	}
	return nil
}

// reason is the ErrorInfo reason of a gRPC error, "" when it has none.
func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

// load calls a tool through gateways at about rate calls per second until
// stopped, and counts the outcomes; a watcher checks between calls that
// every gateway lists the tool.
type load struct {
	ok, failed, unlisted atomic.Int64
	mu                   sync.Mutex
	failures             map[string]int // code/reason → count
	firstFailures        []string
	stopFn               context.CancelFunc
	wg                   sync.WaitGroup
	start                time.Time
	stopped              atomic.Int64 // Unix nanoseconds when stopped
}

func startLoad(t *testing.T, gws []*grpcGateway, tool string, rate int) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{failures: map[string]int{}, stopFn: cancel, start: time.Now()}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	slots := make(chan int, 64)
	l.wg.Go(func() {
		defer tick.Stop()
		defer close(slots)
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			select {
			case slots <- i:
			default: // every worker busy: this slot is skipped, not queued
			}
		}
	})
	for range 64 {
		l.wg.Go(func() {
			for i := range slots {
				g := gws[i%len(gws)]
				msg := fmt.Sprintf("call-%d", i)
				err := g.invoke(context.Background(), tool, msg, 20*time.Second)
				if err == nil {
					l.ok.Add(1)
					continue
				}
				l.failed.Add(1)
				key := status.Code(err).String() + " " + reason(err)
				l.mu.Lock()
				l.failures[key]++
				if len(l.firstFailures) < 10 {
					l.firstFailures = append(l.firstFailures, fmt.Sprintf("%s via gateway %d: %v", msg, i%len(gws), err))
				}
				l.mu.Unlock()
			}
		})
	}
	for i, g := range gws {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				ok, err := g.listed(ctx, tool)
				if err == nil && !ok {
					l.unlisted.Add(1)
					l.mu.Lock()
					if len(l.firstFailures) < 10 {
						l.firstFailures = append(l.firstFailures, fmt.Sprintf("gateway %d did not list %s", i, tool))
					}
					l.mu.Unlock()
				}
				t := time.NewTimer(20 * time.Millisecond)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
		})
	}
	t.Cleanup(l.stop)
	return l
}

func (l *load) stop() {
	l.stopped.CompareAndSwap(0, time.Now().UnixNano())
	l.stopFn()
	l.wg.Wait()
}

// waitCalls waits until n more calls have succeeded.
func (l *load) waitCalls(t *testing.T, n int64, what string) {
	t.Helper()
	want := l.ok.Load() + n
	eventually.True(t, 60*time.Second, fmt.Sprintf("%d more calls answered (%s)", n, what), func() bool { return l.ok.Load() >= want })
}

func (l *load) report() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := time.Now()
	if n := l.stopped.Load(); n != 0 {
		end = time.Unix(0, n)
	}
	took := end.Sub(l.start)
	return fmt.Sprintf("ok %d, failed %d %v, unlisted %d, %.0f calls/s over %v; first problems: %s", l.ok.Load(), l.failed.Load(), l.failures, l.unlisted.Load(),
		float64(l.ok.Load()+l.failed.Load())/took.Seconds(), took.Round(100*time.Millisecond), strings.Join(l.firstFailures, "; "))
}

// waitListed waits until g lists tool name.
func waitListed(t *testing.T, g *grpcGateway, name string) {
	t.Helper()
	eventually.True(t, 60*time.Second, name+" listed", func() bool {
		ok, err := g.listed(t.Context(), name)
		return err == nil && ok
	})
}

// stringOf is the registry conflicts of readiness details, as text.
func stringOf(d map[string]any) string { return fmt.Sprint(d["registry_conflict_details"]) }
