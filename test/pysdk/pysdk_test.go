// Package pysdk tests the Python SDK (sdk/python, the toolgate-service
// package) end to end: its example echo service, and TrustGraph's joke
// service converted by its TrustGraph adapter, run from the checkout as
// processes of their own, behind gateways running in this process, over the
// real broker — calls, streams, errors, reply-to, announcements with
// leases, cancels and the graceful stop.
package pysdk

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/wire"
)

// startTimeout bounds a Python service's start: the interpreter, the
// Pulsar client's connection and its three subscriptions.
const startTimeout = 60 * time.Second

// repoRoot is the checkout this package lives in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// python returns the Python of the project's virtualenv: TOOLGATE_VENV,
// else what scripts/pyenv.sh prints (it installs the venv on first use).
func python(t *testing.T) string {
	t.Helper()
	venv := os.Getenv("TOOLGATE_VENV")
	if venv == "" {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "scripts", "pyenv.sh"))
		cmd.Dir = repoRoot(t)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("scripts/pyenv.sh: %v\n%s", err, stderr.String())
		}
		venv = strings.TrimSpace(string(out))
	}
	return filepath.Join(venv, "bin", "python")
}

// pyService is the example echo service (sdk/python/examples/echo.py) run
// as a process.
type pyService struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

// startEcho runs the Python echo service with id and topic, announcing on
// annTopic, and returns once it has subscribed to its request topic. The
// SDK comes from the checkout (PYTHONPATH), not from what the venv holds.
func startEcho(t *testing.T, name, id, topic, annTopic string, extra ...string) *pyService {
	t.Helper()
	return startExample(t, name, "echo.py", topic, append([]string{
		"--pulsar-url", brokertest.PulsarURL(), "--id", id, "--topic", topic, "--announce-topic", annTopic}, extra...)...)
}

// startExample runs sdk/python/examples/<script> with args and returns once
// it has subscribed to the request topic of topic (short form).
func startExample(t *testing.T, name, script, topic string, args ...string) *pyService {
	t.Helper()
	root := repoRoot(t)
	p := &pyService{name: name, logPath: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{filepath.Join(root, "sdk", "python", "examples", script)}, args...)
	p.cmd = exec.Command(python(t), args...)
	p.cmd.Dir = root
	// PYTHONFAULTHANDLER: a SIGABRT dumps every thread's stack (stopped).
	p.cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1", "PYTHONFAULTHANDLER=1", "PYTHONPATH="+filepath.Join(root, "sdk", "python", "src"))
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	logFile.Close() // the child has its own descriptor
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(15 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.output())
		}
	})
	requestTopic := wire.RequestTopic(topic)
	start := time.Now()
	if !eventually.Holds(startTimeout, func() bool {
		if p.exited() {
			t.Fatalf("%s exited before subscribing (%v):\n%s", name, p.waitErr, p.output())
		}
		return brokertest.Subscriptions(requestTopic) > 0
	}) {
		t.Fatalf("%s did not subscribe to %s within %v:\n%s", name, requestTopic, startTimeout, p.output())
	}
	t.Logf("%s (pid %d) subscribed after %v", name, p.cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
	return p
}

func (p *pyService) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *pyService) output() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// exitCode waits for the process to end, at most d, and returns its exit
// status (-1 for a signal). One still running then is sent SIGABRT, which
// has it print every thread's stack (PYTHONFAULTHANDLER), and the test
// fails with that.
func (p *pyService) exitCode(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		_ = p.cmd.Process.Signal(syscall.SIGABRT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("%s still running %v after it was told to stop; its stacks at SIGABRT:\n%s", p.name, d, p.output())
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode()
	}
	if p.waitErr != nil {
		t.Fatalf("%s: %v", p.name, p.waitErr)
	}
	return 0
}

// gateway is a gateway in this process reading announcements from one
// topic of the test's own.
type gateway struct {
	*apptest.Gateway
	id   string
	base string
}

// startGateway runs a gateway in this process. The tests run in parallel,
// so their gateways start at once: --gc-heap-mib 0 leaves the garbage
// collector's tuner, which is the process's and not safe to start from two
// gateways at a time, alone.
func startGateway(t *testing.T, annTopic, id string, extra ...string) *gateway {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	g := apptest.Start(t, log, append([]string{"--announcements", "--announce-topic", annTopic, "--pulsar-admin-url", brokertest.AdminURL(),
		"--allow-anonymous", "--instance-id", id, "--default-timeout", "30s", "--gc-heap-mib", "0"}, extra...)...)
	g.WaitReady(t, 60*time.Second)
	return &gateway{Gateway: g, id: id, base: "http://" + g.HTTPAddr()}
}

// tools lists the gateway's tool names.
func (g *gateway) tools(t *testing.T) []string {
	t.Helper()
	resp, err := http.Get(g.base + "/v1/tools")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range body.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

func (g *gateway) waitListed(t *testing.T, names ...string) {
	t.Helper()
	eventually.True(t, 30*time.Second, fmt.Sprintf("%v listed by %s", names, g.id), func() bool {
		return slices.Equal(g.tools(t), names)
	})
}

// result is a unary call's answer over REST: the output, or the status.
type result struct {
	HTTP    int
	Output  string `json:"output"`
	Message string `json:"message"`
	Details []struct {
		Reason string `json:"reason"`
	} `json:"details"`
}

func (r result) reason() string {
	if len(r.Details) == 0 {
		return ""
	}
	return r.Details[0].Reason
}

func (g *gateway) invoke(ctx context.Context, tool string, args any) (result, error) {
	body, _ := json.Marshal(map[string]any{"arguments": args})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.base+"/v1/tools/"+tool+":invoke", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	var r result
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &r); err != nil {
		return result{}, fmt.Errorf("HTTP %d %q: %w", resp.StatusCode, b, err)
	}
	r.HTTP = resp.StatusCode
	return r, nil
}

// chunk is one line of an NDJSON stream.
type chunk struct {
	Output  *string `json:"output"`
	Index   string  `json:"index"`
	Last    bool    `json:"last"`
	Code    *int    `json:"code"`
	Message string  `json:"message"`
}

// stream calls tool over REST NDJSON and returns its chunks, up to the
// last one (or the status that ended it).
func (g *gateway) stream(ctx context.Context, tool string, args any) ([]chunk, error) {
	body, _ := json.Marshal(map[string]any{"arguments": args})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.base+"/v1/tools/"+tool+":stream", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	var out []chunk
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c chunk
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return out, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		if c.Code != nil {
			return out, fmt.Errorf("the stream ended with code %d: %s", *c.Code, c.Message)
		}
		out = append(out, c)
		if c.Last {
			return out, nil
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return out, fmt.Errorf("the body ended without a last chunk: %w", err)
}

// deliveries is the sum of msgOutCounter over a topic's subscriptions:
// the messages the broker delivered from it (0 when it does not exist).
func deliveries(t *testing.T, topic string) int64 {
	t.Helper()
	scheme, rest, _ := strings.Cut(topic, "://")
	resp, err := http.Get(brokertest.AdminURL() + "/admin/v2/" + scheme + "/" + rest + "/stats")
	if err != nil {
		t.Fatalf("topic stats of %s: %v", topic, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("topic stats of %s: HTTP %d", topic, resp.StatusCode)
	}
	var st struct {
		Subscriptions map[string]struct {
			MsgOutCounter int64 `json:"msgOutCounter"`
		} `json:"subscriptions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("topic stats of %s: %v", topic, err)
	}
	var n int64
	for _, s := range st.Subscriptions {
		n += s.MsgOutCounter
	}
	return n
}

// metric reads one sample without labels from a gateway's /metrics.
func metric(t *testing.T, g *gateway, name string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + g.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q", name, sc.Text())
			}
			return int64(f)
		}
	}
	return 0
}

// settled waits until f holds still for 600 ms (the broker's counters
// have taken the last replies) and returns its value.
func settled(t *testing.T, what string, f func() int64) int64 {
	t.Helper()
	last, since := f(), time.Now()
	eventually.True(t, 10*time.Second, what+" settled", func() bool {
		if n := f(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= 600*time.Millisecond
	})
	return last
}

// TestPythonEchoBehindGateways: the Python echo service, announced, is
// listed by three gateways and answers calls through them — unary calls,
// typed and untyped errors, arguments refused by its declared schema, a
// 2,000-chunk stream whole and in order, a stream from an async generator
// — each reply delivered once, on the calling gateway's reply topic; then
// it is SIGKILLed, and every gateway unlists it within its lease.
func TestPythonEchoBehindGateways(t *testing.T) {
	brokertest.RequirePulsar(t)
	t.Parallel()
	uniq := brokertest.UniqueTopic("pysdk")
	annTopic := "persistent://tg/config/" + uniq
	const lease = 2 * time.Second
	gws := []*gateway{startGateway(t, annTopic, uniq+"-a"), startGateway(t, annTopic, uniq+"-b"), startGateway(t, annTopic, uniq+"-c")}
	svc := startEcho(t, "echo.py", uniq, uniq, annTopic, "--announce-lease", "2")
	for _, g := range gws {
		g.waitListed(t, "count", "echo")
	}

	t.Run("unary calls and errors", func(t *testing.T) {
		for _, g := range gws {
			r, err := g.invoke(t.Context(), "echo", map[string]any{"msg": "hi from " + g.id})
			if err != nil || r.HTTP != http.StatusOK || r.Output != "hi from "+g.id {
				t.Fatalf("%s: %+v, %v", g.id, r, err)
			}
		}
		g := gws[0]
		for _, c := range []struct {
			args   map[string]any
			tool   string
			status int
			reason string
		}{
			{map[string]any{"mode": "fail", "type": "not-found", "message": "no such thing"}, "echo", http.StatusNotFound, "not-found"},
			{map[string]any{"mode": "fail", "message": "boom"}, "echo", http.StatusInternalServerError, wire.ErrorTypeToolService},
			{map[string]any{"n": "three"}, "count", http.StatusBadRequest, "INVALID_ARGUMENTS"}, // the declared schema
		} {
			r, err := g.invoke(t.Context(), c.tool, c.args)
			if err != nil || r.HTTP != c.status || r.reason() != c.reason {
				t.Errorf("%s %v: HTTP %d %s (%s), %v; want %d %s", c.tool, c.args, r.HTTP, r.reason(), r.Message, err, c.status, c.reason)
			}
		}
		r, err := g.invoke(t.Context(), "echo", map[string]any{"big": 123456789012345678, "list": []any{1.5, "é"}})
		if err != nil || r.Output != `{"big": 123456789012345678, "list": [1.5, "\u00e9"]}` {
			t.Errorf("echo of an object: %q, %v", r.Output, err)
		}
	})

	t.Run("a 2,000-chunk stream arrives whole", func(t *testing.T) {
		const n = 2000
		start := time.Now()
		chunks, err := gws[0].stream(t.Context(), "echo", map[string]any{"mode": "stream", "n": n})
		if err != nil {
			t.Fatalf("after %d chunks: %v", len(chunks), err)
		}
		if len(chunks) != n {
			t.Fatalf("%d chunks, want %d", len(chunks), n)
		}
		for i, c := range chunks {
			want := strconv.Itoa(i) + ","
			if i == n-1 {
				want = strconv.Itoa(i)
			}
			if c.Output == nil || *c.Output != want || c.Index != strconv.Itoa(i) || c.Last != (i == n-1) {
				t.Fatalf("chunk %d: %+v, want %q", i, c, want)
			}
		}
		t.Logf("%d chunks in %v", n, time.Since(start).Round(time.Millisecond))
		// An async generator's chunks, then its end: an empty last chunk.
		chunks, err = gws[1].stream(t.Context(), "count", map[string]any{"n": 500})
		if err != nil || len(chunks) != 501 || *chunks[499].Output != "499," || *chunks[500].Output != "" || !chunks[500].Last {
			t.Fatalf("count: %d chunks, %v", len(chunks), err)
		}
	})

	t.Run("each reply delivered once, to the calling gateway", func(t *testing.T) {
		shared := wire.ResponseTopic(uniq)
		onReplyTopics := func() []int64 {
			var n []int64
			for _, g := range gws {
				n = append(n, deliveries(t, wire.ReplyTopic(g.id)))
			}
			return n
		}
		all := func() int64 {
			n := deliveries(t, shared)
			for _, d := range onReplyTopics() {
				n += d
			}
			return n
		}
		receipts := func() int64 {
			var n int64
			for _, g := range gws {
				n += metric(t, g, "toolgate_bridge_receipts_total")
			}
			return n
		}
		settled(t, "reply deliveries", all)
		before := onReplyTopics()
		sharedBefore, receiptsBefore := deliveries(t, shared), receipts()
		const perGateway = 100
		var wg sync.WaitGroup
		errs := make(chan error, len(gws)*perGateway)
		for gi, g := range gws {
			for w := range 4 {
				wg.Go(func() {
					for i := w; i < perGateway; i += 4 {
						msg := fmt.Sprintf("call %d via %d", i, gi)
						r, err := g.invoke(t.Context(), "echo", map[string]any{"msg": msg})
						if err == nil && r.Output != msg {
							err = fmt.Errorf("%s answered %+v", msg, r)
						}
						if err != nil {
							errs <- err
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		settled(t, "reply deliveries", all)
		got := onReplyTopics()
		var sum int64
		for i := range got {
			got[i] -= before[i]
			sum += got[i]
		}
		onShared, receiptsTaken := deliveries(t, shared)-sharedBefore, receipts()-receiptsBefore
		perCall := float64(sum+onShared-receiptsTaken) / float64(len(gws)*perGateway)
		t.Logf("%d calls through each of %d gateways: %v deliveries on their reply topics, %d on the response topic, %d receipts: %.3f reply deliveries per call",
			perGateway, len(gws), got, onShared, receiptsTaken, perCall)
		if onShared != 0 {
			t.Errorf("%d deliveries on the service's response topic: replies that did not go to reply-to", onShared)
		}
		// A call published again (a hedge, or after a lost reply) is answered
		// again: a few per mille above 1 under load, as test/scale allows.
		if slices.Min(got) < perGateway || perCall > 1.05 {
			t.Errorf("%.3f reply deliveries per call (%v on the reply topics), want 1 each (≤ 1.05)", perCall, got)
		}
	})

	// Last: SIGKILL — no withdrawal, no renewal. The gateways let the
	// instance go when its lease (2 s) runs out, with 2 s for the
	// gateway's timer and this test's polling.
	if err := svc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for _, g := range gws {
		eventually.True(t, lease+2*time.Second-time.Since(killed), "the killed service unlisted by "+g.id, func() bool {
			return len(g.tools(t)) == 0
		})
	}
	t.Logf("unlisted by both gateways %v after SIGKILL (lease %v)", time.Since(killed).Round(time.Millisecond), lease)
}

// TestPythonEchoStopsGracefully: a caller that goes away cancels the call
// at the Python service (on the flow topic for a stream, on the cancel
// topic for a unary call); on SIGTERM the service withdraws its
// announcement — the gateway unlists it long before its lease (30 s) would
// run out — answers the call in flight, and exits 0 within its grace.
func TestPythonEchoStopsGracefully(t *testing.T) {
	brokertest.RequirePulsar(t)
	t.Parallel()
	uniq := brokertest.UniqueTopic("pysdk-stop")
	annTopic := "persistent://tg/config/" + uniq
	g := startGateway(t, annTopic, uniq)
	svc := startEcho(t, "echo.py", uniq, uniq, annTopic, "--announce-lease", "30", "--stop-grace", "5", "--log-level", "DEBUG")
	g.waitListed(t, "count", "echo")

	// A stream given up after its first chunk, and a unary call given up
	// before its answer.
	ctx, cancel := context.WithCancel(t.Context())
	body, _ := json.Marshal(map[string]any{"arguments": map[string]any{"mode": "stream", "n": 1000, "gap_ms": 20}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.base+"/v1/tools/echo:stream", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err = g.invoke(ctx, "echo", map[string]any{"mode": "sleep", "ms": 20000})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call given up: %v", err)
	}
	eventually.True(t, 10*time.Second, "both calls cancelled at the service", func() bool {
		return strings.Count(svc.output(), "call given up by the caller; cancelled") >= 2
	})

	// A call in flight at the SIGTERM is answered. The service has it once
	// its receipt came (the call is not answered within 250 ms).
	receipts := settled(t, "the receipts taken", func() int64 { return metric(t, g, "toolgate_bridge_receipts_total") })
	answer := make(chan result, 1)
	go func() {
		r, err := g.invoke(t.Context(), "echo", map[string]any{"mode": "sleep", "ms": 1500, "msg": "finished"})
		if err != nil {
			r.Message = err.Error()
		}
		answer <- r
	}()
	eventually.True(t, 10*time.Second, "the sleeping call's receipt", func() bool {
		return metric(t, g, "toolgate_bridge_receipts_total") > receipts
	})
	if err := svc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	eventually.True(t, 5*time.Second, "the stopping service unlisted (withdrawn)", func() bool { return len(g.tools(t)) == 0 })
	t.Logf("unlisted %v after SIGTERM", time.Since(stopped).Round(time.Millisecond))
	if r := <-answer; r.HTTP != http.StatusOK || r.Output != "finished" {
		t.Fatalf("the call in flight at the stop: %+v", r)
	}
	if code := svc.exitCode(t, 5*time.Second+3*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0", code)
	}
	t.Logf("exited %v after SIGTERM", time.Since(stopped).Round(time.Millisecond))
	if !strings.Contains(svc.output(), "withdrawn") || !strings.Contains(svc.output(), "tool service stopped") {
		t.Fatalf("no withdrawal or stop in the service's log:\n%s", svc.output())
	}
}

// TestPythonEchoDurableOperation: a durable operation of a gateway with
// --operations is answered by the Python service on the persistent reply
// topic the gateway names (the response namespace's persistent twin),
// keyed by the call's id, and its chunks are kept: the operation ends done
// with the whole answer, and its stream replays every chunk.
func TestPythonEchoDurableOperation(t *testing.T) {
	brokertest.RequirePulsar(t)
	t.Parallel()
	uniq := brokertest.UniqueTopic("pysdk-ops")
	annTopic := "persistent://tg/config/" + uniq
	g := startGateway(t, annTopic, uniq, brokertest.TestOperations(t).Flags()...)
	startEcho(t, "echo.py", uniq, uniq, annTopic)
	g.waitListed(t, "count", "echo")

	resp, err := http.Post(g.base+"/v1/tools/echo:start", "application/json", strings.NewReader(`{"arguments": {"mode": "stream", "n": 50}}`))
	if err != nil {
		t.Fatal(err)
	}
	var op struct {
		Name     string `json:"name"`
		Done     bool   `json:"done"`
		Response struct {
			Output string `json:"output"`
		} `json:"response"`
	}
	err = json.NewDecoder(resp.Body).Decode(&op)
	resp.Body.Close()
	if err != nil || op.Name == "" {
		t.Fatalf("start: HTTP %d %+v, %v", resp.StatusCode, op, err)
	}
	eventually.Succeeds(t, 30*time.Second, "the operation done", func() error {
		r, err := http.Get(g.base + "/v1/" + op.Name)
		if err != nil {
			return err
		}
		defer r.Body.Close()
		if err := json.NewDecoder(r.Body).Decode(&op); err != nil {
			return err
		}
		if !op.Done {
			return errors.New("not done")
		}
		return nil
	})
	var want strings.Builder
	for i := range 49 {
		fmt.Fprintf(&want, "%d,", i)
	}
	want.WriteString("49")
	if op.Response.Output != want.String() {
		t.Fatalf("the operation's answer %q, want %q", op.Response.Output, want.String())
	}
	r, err := http.Get(g.base + "/v1/" + op.Name + ":stream")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	n := 0
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		var c chunk
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil || c.Output == nil || c.Index != strconv.Itoa(n) {
			t.Fatalf("chunk %d of the kept stream: %s (%v)", n, sc.Text(), err)
		}
		n++
		if c.Last {
			break
		}
	}
	if n != 50 {
		t.Fatalf("the kept stream replayed %d chunks, want 50", n)
	}
}
