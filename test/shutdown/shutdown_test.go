// Package shutdown stops the broker under running gateways and a Go SDK
// service, then stops them as an operator would, with SIGTERM: each must
// exit within its grace and a small margin whatever the broker does, the
// calls in flight ending UNAVAILABLE, and log at a bounded rate while the
// broker is away. It runs the real binaries against a broker of its own,
// on ports chosen when it starts, which it stops.
package shutdown

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// The bounds under test: a process told to stop exits within its grace
// and exitMargin, and, while the broker is away, writes at most
// maxLinesPerMinute lines of log.
const (
	grace             = 3 * time.Second
	exitMargin        = 5 * time.Second
	outage            = 25 * time.Second
	maxLinesPerMinute = 60
)

// broker is the test's own broker, started and stopped by scripts/pulsar.sh.
type broker struct {
	port, web string
	dataDir   string
}

func (b broker) url() string      { return "pulsar://127.0.0.1:" + b.port }
func (b broker) adminURL() string { return "http://127.0.0.1:" + b.web }

func (b broker) script(t *testing.T, verb string) {
	t.Helper()
	cmd := exec.Command("scripts/pulsar.sh", verb)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "PULSAR_BROKER_PORT="+b.port, "PULSAR_WEB_PORT="+b.web, "PULSAR_DATA_DIR="+b.dataDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("scripts/pulsar.sh %s (ports %s/%s): %v\n%s", verb, b.port, b.web, err, out)
	}
}

// removeFiles deletes what scripts/pulsar.sh keeps per port in the cache
// (log, lock) once the test passed: every run has new ports.
func (b broker) removeFiles(t *testing.T) {
	if t.Failed() {
		t.Logf("broker log: pulsar-%s.log in the cache's pulsar/ directory", b.web)
		return
	}
	cache := os.Getenv("TOOLGATE_CACHE")
	if cache == "" {
		cache = ".cache"
	}
	if !filepath.IsAbs(cache) {
		cache = filepath.Join("..", "..", cache)
	}
	for _, f := range []string{"pulsar-" + b.web + ".log", "pulsar-" + b.web + ".log.prev", ".lock-" + b.web} {
		_ = os.Remove(filepath.Join(cache, "pulsar", f))
	}
}

// accepts reports whether something accepts connections on addr.
func accepts(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// logLines is a process's stderr, line by line, each with when it came.
type logLines struct {
	mu    sync.Mutex
	buf   []byte
	lines []logLine
}

type logLine struct {
	at   time.Time
	text string
}

func (l *logLines) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.lines = append(l.lines, logLine{at: now, text: string(l.buf[:i])})
		l.buf = l.buf[i+1:]
	}
}

// between counts the lines that came in [from, to).
func (l *logLines) between(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ln := range l.lines {
		if !ln.at.Before(from) && ln.at.Before(to) {
			n++
		}
	}
	return n
}

// containing returns the lines with s.
func (l *logLines) containing(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ln := range l.lines {
		if strings.Contains(ln.text, s) {
			out = append(out, ln.text)
		}
	}
	return out
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var sb strings.Builder
	for _, ln := range l.lines {
		sb.WriteString(ln.text)
		sb.WriteByte('\n')
	}
	sb.Write(l.buf)
	return sb.String()
}

// process is one of the binaries, run by the test.
type process struct {
	name   string
	cmd    *exec.Cmd
	log    *logLines
	exited chan struct{} // closed when it has exited; then err is its end
	err    error
	at     time.Time // when it exited
}

func start(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(bin, args...), log: &logLines{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		p.at = time.Now()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.log)
		}
	})
	return p
}

// status is the process's exit status, -1 when a signal ended it.
func (p *process) status() int {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		return -1
	}
	return 0
}

// build builds the command at pkg (./cmd/...) into dir.
func build(t *testing.T, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return brokertest.FreeAddr(t)
}

// gateway is a gateway process and its addresses.
type gateway struct {
	*process
	grpc, http, admin string
}

func startGateway(t *testing.T, bin, name, instance string, b broker, extra ...string) *gateway {
	t.Helper()
	g := &gateway{grpc: freeAddr(t), http: freeAddr(t), admin: freeAddr(t)}
	args := append([]string{"--grpc-addr", g.grpc, "--http-addr", g.http, "--admin-addr", g.admin,
		"--pulsar-url", b.url(), "--pulsar-admin-url", b.adminURL(), "--allow-anonymous",
		"--instance-id", brokertest.UniqueTopic(instance), "--shutdown-grace", grace.String()}, extra...)
	g.process = start(t, name, bin, args...)
	return g
}

// ready waits until the gateway serves tool (announced) and is ready.
func (g *gateway) ready(t *testing.T, tool string) {
	t.Helper()
	eventually.Succeeds(t, 60*time.Second, g.name+" ready, serving "+tool, func() error {
		select {
		case <-g.exited:
			t.Fatalf("%s exited: %v", g.name, g.err)
		default:
		}
		resp, err := http.Get("http://" + g.admin + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("/readyz %d: %s", resp.StatusCode, b)
		}
		if resp, err = http.Get("http://" + g.http + "/v1/tools/" + tool); err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v1/tools/%s: %d", tool, resp.StatusCode)
		}
		return nil
	})
}

// published is the gateway's count of requests published.
func (g *gateway) published() float64 {
	resp, err := http.Get("http://" + g.admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var sum float64
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "toolgate_bridge_published_total")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// callEnd is how a call in flight ended.
type callEnd struct {
	what string
	code codes.Code
	msg  string
	at   time.Time
}

// TestStopWithTheBrokerGone: a Go SDK service (announcing its tool) and
// two gateways with --operations, reading announcements — one idle, one
// with calls and an operation in flight — run on the test's broker, which
// is stopped. While it is away they log at a bounded rate; SIGTERM then
// stops each within its grace and exitMargin, its ports free, the calls
// ended UNAVAILABLE, with exit status 0 or, when closes that waited for
// the broker were abandoned, 3 and one line saying what.
func TestStopWithTheBrokerGone(t *testing.T) {
	ports := brokertest.FreePorts(t, 2)
	b := broker{port: strconv.Itoa(ports[0]), web: strconv.Itoa(ports[1]), dataDir: t.TempDir()}
	bins := t.TempDir()
	var gwBin, echoBin string
	var built sync.WaitGroup
	built.Go(func() { gwBin = build(t, bins, "./cmd/gateway") })
	built.Go(func() { echoBin = build(t, bins, "./cmd/echo-service") })
	b.script(t, "up")
	built.Wait()
	if t.Failed() {
		t.FailNow()
	}
	brokerDown := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-brokerDown:
		default:
			b.script(t, "down")
		}
		b.removeFiles(t)
	})

	topic := brokertest.UniqueTopic("shutdown")
	svc := start(t, "echo service", echoBin, "--pulsar-url", b.url(), "--announce", "--id", topic, "--topic", topic,
		"--stop-grace", grace.String())
	ops := brokertest.TestOperations(t)
	idle := startGateway(t, gwBin, "idle gateway", "idle", b, ops.Flags()...)
	busy := startGateway(t, gwBin, "busy gateway", "busy", b, ops.Flags()...)
	idle.ready(t, "echo")
	busy.ready(t, "echo")

	// The calls in flight on the busy gateway: a gRPC call, a REST
	// stream, and an operation with a WaitOperation on it.
	conn, err := grpc.NewClient(busy.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tools, lro := toolgatev1.NewToolServiceClient(conn), longrunningpb.NewOperationsClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sleep, _ := structpb.NewStruct(map[string]any{"mode": "sleep", "ms": 120000.0})
	op, err := tools.StartTool(ctx, &toolgatev1.StartToolRequest{Name: "echo", Arguments: sleep, Timeout: durationpb.New(2 * time.Minute)})
	if err != nil {
		t.Fatalf("StartTool: %v", err)
	}
	ends := make(chan callEnd, 3)
	grpcEnd := func(what string, err error) callEnd {
		st := status.Convert(err)
		return callEnd{what: what, code: st.Code(), msg: st.Message(), at: time.Now()}
	}
	go func() {
		_, err := tools.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: sleep, Timeout: durationpb.New(2 * time.Minute)})
		ends <- grpcEnd("gRPC InvokeTool", err)
	}()
	go func() {
		_, err := lro.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{Name: op.GetName(), Timeout: durationpb.New(2 * time.Minute)})
		ends <- grpcEnd("gRPC WaitOperation", err)
	}()
	streaming := make(chan struct{})
	go func() { ends <- restStream(ctx, busy.http, streaming) }()
	select {
	case <-streaming:
	case e := <-ends:
		t.Fatalf("%s ended before the broker stopped: %v %s", e.what, e.code, e.msg)
	case <-time.After(30 * time.Second):
		t.Fatal("no chunk of the REST stream in 30 s")
	}
	eventually.True(t, 20*time.Second, "the operation's, the call's and the stream's requests published", func() bool {
		return busy.published() >= 3
	})

	// The broker goes away.
	go func() { defer close(brokerDown); b.script(t, "down") }()
	eventually.True(t, 60*time.Second, "the broker's port closed", func() bool { return !accepts("127.0.0.1:" + b.port) })
	down := time.Now()
	procs := []*process{svc, idle.process, busy.process}
	select {
	case <-svc.exited:
		t.Fatalf("the echo service exited while the broker was away: %v", svc.err)
	case <-idle.exited:
		t.Fatalf("the idle gateway exited while the broker was away: %v", idle.err)
	case <-busy.exited:
		t.Fatalf("the busy gateway exited while the broker was away: %v", busy.err)
	case e := <-ends:
		t.Fatalf("%s ended while the broker was away, before SIGTERM: %v %s", e.what, e.code, e.msg)
	case <-time.After(outage):
	}

	sigterm := time.Now()
	for _, p := range procs {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	bound := grace + exitMargin
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-time.After(time.Until(sigterm.Add(bound))):
		}
	}
	var calls []callEnd
	for range 3 {
		select {
		case e := <-ends:
			calls = append(calls, e)
		case <-time.After(time.Until(sigterm.Add(bound))):
		}
	}

	t.Run("exits in time", func(t *testing.T) {
		for _, p := range procs {
			select {
			case <-p.exited:
			default:
				t.Errorf("%s still running %v after SIGTERM (grace %v)", p.name, time.Since(sigterm).Round(time.Millisecond), grace)
				continue
			}
			took := p.at.Sub(sigterm)
			abandoned := p.log.containing("abandoning what had not closed")
			t.Logf("%s exited %v after SIGTERM with status %d; %d line(s) on what it abandoned", p.name, took.Round(time.Millisecond), p.status(), len(abandoned))
			if took > bound {
				t.Errorf("%s exited %v after SIGTERM, over its grace %v + %v", p.name, took.Round(time.Millisecond), grace, exitMargin)
			}
			switch st := p.status(); {
			case st == 3 && len(abandoned) == 1:
				t.Logf("%s: %s", p.name, abandoned[0])
			case st == 0 && len(abandoned) == 0:
			default:
				t.Errorf("%s: exit status %d with %d line(s) on what it abandoned, want 0 with none or 3 with one: %q", p.name, st, len(abandoned), abandoned)
			}
		}
	})
	t.Run("ports free", func(t *testing.T) {
		// A gateway started in its place can listen there.
		for _, g := range []*gateway{idle, busy} {
			for _, addr := range []string{g.grpc, g.http, g.admin} {
				l, err := net.Listen("tcp", addr)
				if err != nil {
					t.Errorf("%s's address %s, %v after SIGTERM: %v", g.name, addr, time.Since(sigterm).Round(time.Millisecond), err)
					continue
				}
				l.Close()
			}
		}
	})
	t.Run("calls end UNAVAILABLE", func(t *testing.T) {
		if len(calls) < 3 {
			t.Errorf("%d of 3 calls in flight ended within %v of SIGTERM: %+v", len(calls), bound, calls)
		}
		for _, e := range calls {
			t.Logf("%s: %v %q, %v after SIGTERM", e.what, e.code, e.msg, e.at.Sub(sigterm).Round(time.Millisecond))
			if e.code != codes.Unavailable {
				t.Errorf("%s ended %v %q, want UNAVAILABLE", e.what, e.code, e.msg)
			}
		}
	})
	t.Run("log rate while the broker is away", func(t *testing.T) {
		for _, p := range procs {
			n := p.log.between(down, sigterm)
			perMinute := float64(n) / sigterm.Sub(down).Minutes()
			t.Logf("%s: %d lines in the %v the broker was away before SIGTERM (%.0f a minute)", p.name, n, sigterm.Sub(down).Round(time.Second), perMinute)
			if perMinute > maxLinesPerMinute {
				t.Errorf("%s wrote %.0f lines a minute while the broker was away, over %d", p.name, perMinute, maxLinesPerMinute)
			}
		}
	})
}

// restStream streams from the echo tool over REST until the stream ends;
// streaming is closed at its first chunk. Its end is the status of its
// last line (NDJSON: a google.rpc.Status after the chunks), or of the
// answer.
func restStream(ctx context.Context, addr string, streaming chan<- struct{}) callEnd {
	end := func(c codes.Code, msg string) callEnd {
		return callEnd{what: "REST stream", code: c, msg: msg, at: time.Now()}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/tools/echo:stream",
		strings.NewReader(`{"arguments": {"mode": "stream", "n": 100000, "gap_ms": 200}, "timeout": "120s"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		close(streaming)
		return end(codes.Unknown, err.Error())
	}
	defer resp.Body.Close()
	var last string
	sc := bufio.NewScanner(resp.Body)
	first := true
	for sc.Scan() {
		last = sc.Text()
		if first {
			first = false
			close(streaming)
		}
	}
	if first {
		close(streaming)
	}
	var st struct {
		Code    codes.Code `json:"code"`
		Message string     `json:"message"`
	}
	if err := json.Unmarshal([]byte(last), &st); err != nil || st.Code == codes.OK {
		return end(codes.Unknown, fmt.Sprintf("HTTP %d, last line %q (%v)", resp.StatusCode, last, sc.Err()))
	}
	return end(st.Code, st.Message)
}
