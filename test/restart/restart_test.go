// Package restart stops and restarts a real Pulsar broker under a running
// gateway. It uses a broker of its own, on ports chosen when it starts, so
// that the other test packages, which share the main broker, are not
// disturbed and concurrent runs do not meet.
package restart

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// The broker's ports and URLs, chosen by pickPorts.
var brokerPort, webPort, pulsarURL, adminURL string

// pickPorts chooses two free ports below the ephemeral range (so that no
// outgoing connection takes one while the broker is down for the restart).
func pickPorts(t *testing.T) {
	t.Helper()
	var ports []string
	for i := 0; len(ports) < 2; i++ {
		if i == 1000 {
			t.Fatal("no two free ports found between 20000 and 32000")
		}
		p := strconv.Itoa(20000 + mrand.IntN(12000))
		l, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil || slices.Contains(ports, p) {
			continue
		}
		l.Close()
		ports = append(ports, p)
	}
	brokerPort, webPort = ports[0], ports[1]
	pulsarURL, adminURL = "pulsar://127.0.0.1:"+brokerPort, "http://127.0.0.1:"+webPort
}

// removeBrokerFiles deletes what scripts/pulsar.sh keeps per port in the
// cache (log, lock), once the test passed: every run has new ports.
func removeBrokerFiles(t *testing.T) {
	if t.Failed() {
		t.Logf("broker log: pulsar-%s.log in the cache's pulsar/ directory", webPort)
		return
	}
	cache := os.Getenv("TOOLGATE_CACHE") // as scripts/pulsar.sh sees it, from the repository's root
	if cache == "" {
		cache = ".cache"
	}
	if !filepath.IsAbs(cache) {
		cache = filepath.Join("..", "..", cache)
	}
	for _, f := range []string{"pulsar-" + webPort + ".log", "pulsar-" + webPort + ".log.prev", ".lock-" + webPort} {
		_ = os.Remove(filepath.Join(cache, "pulsar", f))
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pulsar-client-go v0.19: a closed producer's send-timeout goroutine
		// only notices the close when its timer next fires.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
	)
}

// dataDir keeps the broker's metadata across the restart, as a production
// broker's does, so tenants and namespaces exist when clients reconnect.
var dataDir string

func pulsarScript(t *testing.T, verb string) {
	t.Helper()
	cmd := exec.Command("scripts/pulsar.sh", verb)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "PULSAR_BROKER_PORT="+brokerPort, "PULSAR_WEB_PORT="+webPort, "PULSAR_DATA_DIR="+dataDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/pulsar.sh %s (ports %s/%s): %v\n%s", verb, brokerPort, webPort, err, out)
	}
}

func consumers(topic string) int {
	scheme, rest, _ := strings.Cut(topic, "://")
	resp, err := http.Get(adminURL + "/admin/v2/" + scheme + "/" + rest + "/stats")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var st struct {
		Subscriptions map[string]struct {
			Consumers []any `json:"consumers"`
		} `json:"subscriptions"`
	}
	if resp.StatusCode != http.StatusOK || decodeJSON(resp, &st) != nil {
		return 0
	}
	n := 0
	for _, s := range st.Subscriptions {
		n += len(s.Consumers)
	}
	return n
}

// get returns the status and body of a GET, 0 when it cannot connect.
func get(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestBrokerRestartUnderLoad(t *testing.T) {
	dataDir = t.TempDir()
	pickPorts(t)
	pulsarScript(t, "up")
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			pulsarScript(t, "down")
		}
		removeBrokerFiles(t)
	})

	topic := brokertest.UniqueTopic("restart")
	reqTopic, respTopic := "non-persistent://tg/request/"+topic, "non-persistent://tg/response/"+topic
	// The gateway's own reply topic (reply-to is on): replies to its calls
	// come there, so a call needs its consumer back as much as the others.
	replyTopic := wire.ReplyTopic(topic)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	var handling atomic.Int32 // calls the service is handling now
	handle := func(ctx context.Context, r *toolservice.Request) (any, error) {
		handling.Add(1)
		defer handling.Add(-1)
		return echo.Handle(ctx, r)
	}
	svc, err := toolservice.New(toolservice.Config{ID: "restart-echo", Topic: topic, PulsarURL: pulsarURL, MaxConcurrency: 256, StopGrace: time.Second, Logger: log}, handle)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := svc.Run(ctx); err != nil {
			t.Errorf("echo service: %v", err)
		}
	}()

	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, fmt.Appendf(nil, "tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, service: echo-service}\n", topic), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := apptest.Start(t, log, "--pulsar-url", pulsarURL,
		"--registry", reg, "--shutdown-grace", "2s", "--allow-anonymous", "--instance-id", topic)
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := toolgatev1.NewToolServiceClient(conn)
	invoke := func(ctx context.Context, args map[string]any) (string, error) {
		s, _ := structpb.NewStruct(args)
		r, err := client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: s})
		return r.GetOutput(), err
	}
	subscribed := func() bool { return consumers(reqTopic) > 0 && consumers(respTopic) > 0 && consumers(replyTopic) > 0 }
	eventually.True(t, 30*time.Second, "service and gateway subscribed", subscribed)
	if got, err := invoke(t.Context(), map[string]any{"msg": "before"}); err != nil || got != "before" {
		t.Fatalf("before the restart: %q %v", got, err)
	}

	// Calls in flight when the broker goes away end by their deadline, with
	// UNAVAILABLE or DEADLINE_EXCEEDED; none hangs.
	const n, deadline = 40, 6 * time.Second
	type result struct{ err error }
	results := make(chan result, n)
	for i := range n {
		go func() {
			cctx, ccancel := context.WithTimeout(context.Background(), deadline)
			defer ccancel()
			_, err := invoke(cctx, map[string]any{"mode": "sleep", "ms": 4000.0, "msg": fmt.Sprint(i)})
			results <- result{err}
		}()
	}
	eventually.True(t, 30*time.Second, "every call reached the service", func() bool { return handling.Load() == n })
	// Readiness follows the broker: 503 while it is down (the delay after
	// its port closed is logged; the broker may close connections earlier).
	readyz := "http://" + gw.HTTPAddr() + "/readyz"
	if code, body := get(readyz); code != http.StatusOK {
		t.Fatalf("/readyz before the restart: %d %s", code, body)
	}
	// A steady rate of calls, over gRPC (5 s deadlines) and REST
	// ("timeout": "10s"), from before the broker goes until it is back.
	steady := startSteady(client, gw.HTTPAddr())
	defer steady.stop()
	var portGoneAt atomic.Int64
	watched := make(chan time.Duration, 1)
	go func() {
		var portGone, notReady time.Time
		eventually.Holds(2*time.Minute, func() bool {
			if notReady.IsZero() {
				if code, _ := get(readyz); code == http.StatusServiceUnavailable {
					notReady = time.Now()
				}
			}
			if portGone.IsZero() {
				if c, err := net.DialTimeout("tcp", "127.0.0.1:"+brokerPort, 200*time.Millisecond); err != nil {
					portGone = time.Now()
				} else {
					c.Close()
				}
			}
			return !portGone.IsZero() && !notReady.IsZero()
		})
		if !portGone.IsZero() {
			portGoneAt.Store(portGone.UnixNano())
		}
		if portGone.IsZero() || notReady.IsZero() {
			watched <- -1
			return
		}
		watched <- notReady.Sub(portGone)
	}()
	pulsarScript(t, "down")
	stopped = true
	switch d := <-watched; {
	case d < 0:
		t.Errorf("/readyz did not turn 503 while the broker was down")
	default:
		t.Logf("/readyz turned 503 %v after the broker's port closed (negative: before)", d.Round(time.Millisecond))
	}
	// the details are the admin listener's
	if code, body := get("http://" + gw.AdminAddr() + "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"broker_connected":false`) {
		t.Errorf("admin /readyz with the broker down: %d %s, want 503 with broker_connected false", code, body)
	}
	for range n {
		r := <-results
		if c := status.Code(r.err); c != codes.Unavailable && c != codes.DeadlineExceeded {
			t.Errorf("a call in flight during the outage ended with %v, want UNAVAILABLE or DEADLINE_EXCEEDED", r.err)
		}
	}

	// Every call started after the broker went away, until it is started
	// again, is refused with UNAVAILABLE and a RetryInfo; none
	// waits for its deadline.
	gone := time.Unix(0, portGoneAt.Load())
	upAt := time.Now()
	eventually.True(t, 15*time.Second, "the calls started while the broker was down ended", func() bool { return steady.endedBefore(upAt) })
	checked := 0
	for _, r := range steady.results() {
		if r.start.Before(gone) || !r.start.Before(upAt) {
			continue
		}
		checked++
		// Not DEADLINE_EXCEEDED at its 10 s deadline: refused, retryably.
		if r.code != codes.Unavailable || !r.retry {
			t.Errorf("a %s call started %v after the broker went away ended with %v (RetryInfo: %v) after %v, want UNAVAILABLE with a RetryInfo",
				r.door, r.start.Sub(gone).Round(time.Millisecond), r.code, r.retry, r.end.Sub(r.start).Round(time.Millisecond))
		}
	}
	if checked == 0 {
		t.Errorf("no call started while the broker was down")
	}
	t.Logf("%d calls started while the broker was down: %s", checked, steady.summary(gone, upAt))

	// The broker comes back: producers and consumers reattach by themselves
	// and the first call succeeds, without restarting anything.
	pulsarScript(t, "up")
	stopped = false
	up := time.Now()
	eventually.True(t, 60*time.Second, "/readyz 200 again", func() bool { code, _ := get(readyz); return code == http.StatusOK })
	t.Logf("/readyz 200 again %v after the broker was up", time.Since(up).Round(time.Millisecond))
	eventually.True(t, 60*time.Second, "service and gateway subscribed again", subscribed)
	if got, err := invoke(t.Context(), map[string]any{"msg": "after"}); err != nil || got != "after" {
		t.Fatalf("first call after the restart: %q %v", got, err)
	}
	// The steady calls are served again too, without a restart.
	back := time.Now()
	eventually.True(t, 30*time.Second, "steady calls over both doors served again", func() bool { return steady.servedSince(back) })
}

// steadyResult is one call of the steady load.
type steadyResult struct {
	door       string // "grpc" or "rest"
	start, end time.Time
	code       codes.Code
	retry      bool // a RetryInfo came with the error
}

// steadyLoad starts a call every 50 ms, alternately over gRPC and REST,
// each in a goroutine of its own, until stopped.
type steadyLoad struct {
	mu      sync.Mutex
	done    []steadyResult
	running map[int]time.Time // call number → start
	stopc   chan struct{}
	wg      sync.WaitGroup
}

func startSteady(client toolgatev1.ToolServiceClient, httpAddr string) *steadyLoad {
	l := &steadyLoad{running: map[int]time.Time{}, stopc: make(chan struct{})}
	hc := &http.Client{Timeout: 20 * time.Second}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.stopc:
				return
			case <-tick.C:
			}
			start := time.Now()
			l.mu.Lock()
			l.running[i] = start
			l.mu.Unlock()
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				r := steadyResult{start: start}
				if i%2 == 0 {
					r.door = "grpc"
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					s, _ := structpb.NewStruct(map[string]any{"msg": "steady"})
					_, err := client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: s})
					cancel()
					st := status.Convert(err)
					r.code = st.Code()
					for _, d := range st.Details() {
						if _, ok := d.(*errdetails.RetryInfo); ok {
							r.retry = true
						}
					}
				} else {
					r.door = "rest"
					r.code, r.retry = restInvoke(hc, httpAddr)
				}
				r.end = time.Now()
				l.mu.Lock()
				delete(l.running, i)
				l.done = append(l.done, r)
				l.mu.Unlock()
			}()
		}
	}()
	return l
}

// restInvoke calls echo over REST with "timeout": "10s": the gRPC code the
// HTTP status stands for, and whether a Retry-After came with it.
func restInvoke(hc *http.Client, addr string) (codes.Code, bool) {
	resp, err := hc.Post("http://"+addr+"/v1/tools/echo:invoke", "application/json",
		strings.NewReader(`{"arguments": {"msg": "steady"}, "timeout": "10s"}`))
	if err != nil {
		return codes.Unknown, false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	retry := resp.Header.Get("Retry-After") != ""
	switch resp.StatusCode {
	case http.StatusOK:
		return codes.OK, retry
	case http.StatusServiceUnavailable:
		return codes.Unavailable, retry
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded, retry
	}
	return codes.Unknown, retry
}

func (l *steadyLoad) stop() {
	select {
	case <-l.stopc:
	default:
		close(l.stopc)
	}
	l.wg.Wait()
}

// endedBefore: every call started before t has ended.
func (l *steadyLoad) endedBefore(t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, start := range l.running {
		if start.Before(t) {
			return false
		}
	}
	return true
}

// servedSince: calls started after t succeeded over both doors.
func (l *steadyLoad) servedSince(t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok := map[string]bool{}
	for _, r := range l.done {
		if r.start.After(t) && r.code == codes.OK {
			ok[r.door] = true
		}
	}
	return ok["grpc"] && ok["rest"]
}

func (l *steadyLoad) results() []steadyResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.done)
}

// summary counts the outcomes of calls started in [from, to) and gives
// the longest.
func (l *steadyLoad) summary(from, to time.Time) string {
	counts := map[string]int{}
	var longest time.Duration
	for _, r := range l.results() {
		if r.start.Before(from) || !r.start.Before(to) {
			continue
		}
		counts[r.door+" "+r.code.String()]++
		longest = max(longest, r.end.Sub(r.start))
	}
	return fmt.Sprintf("%v, the longest %v", counts, longest.Round(time.Millisecond))
}
