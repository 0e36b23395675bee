package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/backoff"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	// callTimeout is the deadline every call of the load carries (the
	// request's timeout field, which the gateway enforces).
	callTimeout = 3 * time.Second
	// grace is how long past its deadline the caller waits for the
	// gateway's answer before calling the call late (scheduling on a
	// busy 2-core machine, not a promise of the gateway's).
	grace = time.Second
	// slowMS is how long the slow calls of the load take at the service,
	// so that some are always in flight when topics move or a broker dies.
	slowMS = 300
)

// call is the record of one call of the load.
type call struct {
	gw, msg    string // msg: an echo call's message ("" for Python calls)
	start, end time.Time
	code       codes.Code
	late       bool // the gateway had not answered by the deadline plus grace
	wrong      bool // answered with another call's output
}

type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) add(c call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// gateway is one toolgate gateway run in the test process.
type gateway struct {
	name, id, url string
	gw            *app.Gateway
	conn          *grpc.ClientConn
	client        toolgatev1.ToolServiceClient
	stop          func()
}

// startGateway starts a gateway on the cluster's brokers (url), given both
// brokers' admin APIs (admin, comma-separated) for its watch of calls in
// flight.
func startGateway(t *testing.T, name, url, admin, registry string, log *slog.Logger) *gateway {
	t.Helper()
	id := brokertest.UniqueTopic("cluster-" + name)
	gw := apptest.Start(t, log.With("gateway", name), "--pulsar-url", url, "--pulsar-admin-url", admin,
		"--registry", registry, "--shutdown-grace", "2s", "--allow-anonymous", "--instance-id", id)
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{name: name, id: id, url: url, gw: gw.Gateway, conn: conn, client: toolgatev1.NewToolServiceClient(conn)}
	g.stop = sync.OnceFunc(func() { conn.Close(); _ = gw.Stop() })
	t.Cleanup(g.stop)
	return g
}

func (g *gateway) invoke(ctx context.Context, args map[string]any) (string, error) {
	return g.invokeTool(ctx, "echo", args)
}

func (g *gateway) invokeTool(ctx context.Context, tool string, args map[string]any) (string, error) {
	s, err := structpb.NewStruct(args)
	if err != nil {
		return "", err
	}
	r, err := g.client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: tool, Arguments: s, Timeout: durationpb.New(callTimeout)})
	return r.GetOutput(), err
}

func (g *gateway) hasTool(name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := g.client.ListTools(ctx, &toolgatev1.ListToolsRequest{})
	if err != nil {
		return false
	}
	return slices.ContainsFunc(r.GetTools(), func(x *toolgatev1.Tool) bool { return x.GetName() == name })
}

// adminClient keeps no idle connections (goleak).
var adminClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// get fetches one of the gateway's admin endpoints (/readyz with its
// details, /metrics).
func (g *gateway) get(path string) (int, string) {
	resp, err := adminClient.Get("http://" + g.gw.AdminAddr() + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric sums the samples of a metric family in the gateway's /metrics.
func (g *gateway) metric(t *testing.T, name string) float64 {
	t.Helper()
	code, body := g.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("gateway %s: /metrics answered %d", g.name, code)
	}
	var sum float64
	found := false
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		var v float64
		f := strings.Fields(line)
		if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
			sum += v
			found = true
		}
	}
	if !found {
		t.Fatalf("gateway %s: /metrics lacks %s", g.name, name)
	}
	return sum
}

// The kinds of call of the load.
const (
	fast   = iota // echo, answered at once
	slow          // echo, answered after slowMS
	python        // TrustGraph's Python joke service
)

// pyJokePrefix starts every answer of the Python joke service with style pun.
const pyJokePrefix = "Here's a pun for you:"

// load calls through g until ctx ends, one call after the other. Echo
// calls each have their own output, so that a reply given to the wrong
// caller shows; Python calls are recorded under the gateway's name plus
// "-py".
func load(ctx context.Context, g *gateway, worker, kind int, rec *recorder) {
	for seq := 0; ctx.Err() == nil; seq++ {
		msg := fmt.Sprintf("gw%s-%d-%d", g.name, worker, seq)
		tool, args, who := "echo", map[string]any{"msg": msg}, g.name
		switch kind {
		case slow:
			args["mode"], args["ms"] = "sleep", float64(slowMS)
		case python:
			tool, args, who = "py-tell-joke", map[string]any{"topic": "programming"}, g.name+"-py"
		}
		cctx, cancel := context.WithTimeout(context.Background(), callTimeout+grace)
		c := call{gw: who, start: time.Now()}
		if kind != python {
			c.msg = msg
		}
		out, err := g.invokeTool(cctx, tool, args)
		c.end, c.code = time.Now(), status.Code(err)
		c.late = cctx.Err() != nil // the caller gave up: no answer by the deadline plus grace
		cancel()
		if err == nil {
			c.wrong = kind != python && out != msg || kind == python && !strings.HasPrefix(out, pyJokePrefix)
		}
		rec.add(c)
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// spy reads a gateway's reply topic on a subscription of its own and
// counts the replies there that belong to another gateway's callers.
type spy struct {
	mu              sync.Mutex
	seen, misrouted map[string]int
	examples        []string
}

func (s *spy) run(ctx context.Context, t *testing.T, c pulsar.Client, g *gateway, wg *sync.WaitGroup) {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: wire.ReplyTopic(g.id), SubscriptionName: "spy", Type: pulsar.Exclusive,
		BackOffPolicyFunc: func() backoff.Policy { return steadyBackoff{} }})
	if err != nil {
		t.Fatalf("spy on %s: %v", wire.ReplyTopic(g.id), err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cons.Close()
		for {
			m, err := cons.Receive(ctx)
			if err != nil {
				return
			}
			p := string(m.Payload())
			s.mu.Lock()
			s.seen[g.name]++
			// every reply of the load names its caller's gateway: "gwA-…"
			if i := strings.Index(p, `"gw`); i >= 0 && !strings.HasPrefix(p[i:], `"gw`+g.name+"-") {
				s.misrouted[g.name]++
				if len(s.examples) < 5 {
					s.examples = append(s.examples, g.name+": "+p)
				}
			}
			s.mu.Unlock()
		}
	}()
}

// steadyBackoff has the spy retry every 200 ms (the client library's own
// policy backs off up to a minute), so that it is back on the reply topic
// as soon as the gateway is.
type steadyBackoff struct{}

func (steadyBackoff) Next() time.Duration       { return 200 * time.Millisecond }
func (steadyBackoff) IsMaxBackoffReached() bool { return false }
func (steadyBackoff) Reset()                    {}

func (s *spy) count(gw string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[gw]
}

// window sums up the calls started in [from, to).
func window(calls []call, from, to time.Time) string {
	var n, ok int
	var durs []time.Duration
	for _, c := range calls {
		if c.start.Before(from) || !c.start.Before(to) {
			continue
		}
		n++
		if c.code == codes.OK {
			ok++
		}
		durs = append(durs, c.end.Sub(c.start))
	}
	if n == 0 {
		return "no calls"
	}
	slices.Sort(durs)
	return fmt.Sprintf("%d calls, %d ok, median %s, max %s", n, ok, durs[n/2].Round(time.Millisecond), durs[n-1].Round(time.Millisecond))
}

// recovery returns, for the calls of gateway gw, when it recovered after
// at: the end of the first successful call started after at after which
// no call started failed (zero when there is none yet).
func recovery(calls []call, gw string, at time.Time) time.Time {
	var first time.Time
	for _, c := range calls {
		if c.gw != gw || c.start.Before(at) {
			continue
		}
		switch {
		case c.code != codes.OK:
			first = time.Time{}
		case first.IsZero():
			first = c.end
		}
	}
	return first
}

// okSince counts gw's calls started at or after at that were answered.
func okSince(calls []call, gw string, at time.Time) int {
	n := 0
	for _, c := range calls {
		if c.gw == gw && c.code == codes.OK && !c.start.Before(at) {
			n++
		}
	}
	return n
}

// answering reports whether each of series has n calls answered since at.
func answering(rec *recorder, series []string, at time.Time, n int) func() bool {
	return func() bool {
		calls := rec.snapshot()
		for _, s := range series {
			if okSince(calls, s, at) < n {
				return false
			}
		}
		return true
	}
}

// okRate is the successful calls per second that started in [from, to).
func okRate(calls []call, from, to time.Time) float64 {
	n := 0
	for _, c := range calls {
		if c.code == codes.OK && !c.start.Before(from) && c.start.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// outcomes counts the codes of the calls in flight at some moment in [from, to].
func outcomes(calls []call, from, to time.Time) map[codes.Code]int {
	m := map[codes.Code]int{}
	for _, c := range calls {
		if c.start.Before(to) && c.end.After(from) {
			m[c.code]++
		}
	}
	return m
}

// retryable are the codes a call may end with when its topic moves or its
// broker dies: the caller can try again.
var retryable = []codes.Code{codes.OK, codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted}

func TestFailover(t *testing.T) {
	c := startCluster(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	// Two replicas of one Go SDK service, each given both brokers (a
	// different one first); they announce the echo tool on the
	// persistent, compacted announcements topic.
	const svcTopic = "cluster-echo"
	reqTopic, respTopic := wire.RequestTopic(svcTopic), wire.ResponseTopic(svcTopic)
	announce := &toolservice.Announcement{Tools: []toolservice.Tool{{Name: "echo", Description: "echoes msg",
		Arguments: []toolservice.Argument{{Name: "msg"}, {Name: "mode"}, {Name: "ms", Type: "number"}}}}}
	// The echo service notes each request it takes: a call that ran to its
	// deadline was either dropped on the way there (the gateway must see
	// that and end it early) or answered into a reply topic that was
	// moving (nobody can tell then; it ends at its deadline).
	var takenMu sync.Mutex
	taken := map[string]bool{}
	handle := func(ctx context.Context, r *toolservice.Request) (any, error) {
		if msg, ok := r.Arguments["msg"].(string); ok {
			takenMu.Lock()
			taken[msg] = true
			takenMu.Unlock()
		}
		return echo.Handle(ctx, r)
	}
	svcCtx, svcCancel := context.WithCancel(context.Background())
	var svcWG sync.WaitGroup
	defer func() { svcCancel(); svcWG.Wait() }()
	for i := range 2 {
		svc, err := toolservice.New(toolservice.Config{ID: "cluster-echo", Topic: svcTopic, PulsarURL: c.ServiceURL(i),
			MaxConcurrency: 256, StopGrace: time.Second, Logger: log.With("service", i), Announce: announce}, handle)
		if err != nil {
			t.Fatal(err)
		}
		svcWG.Add(1)
		go func() {
			defer svcWG.Done()
			if err := svc.Run(svcCtx); err != nil {
				t.Errorf("echo service %d: %v", i, err)
			}
		}()
	}
	eventually.True(t, 60*time.Second, "both service replicas subscribed", func() bool { return c.Consumers(reqTopic) >= 2 })

	// TrustGraph's Python joke service, from the registry file (it does
	// not announce); it answers on the shared response topic (it knows no
	// reply-to), which every gateway reads.
	const pyTopic = "cluster-pyjoke"
	registry := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(registry, fmt.Appendf(nil, `tool-service:
  py-joke-service: {topic: %s, config-params: [style]}
tool:
  py-tell-joke: {type: tool-service, description: a pun, service: py-joke-service, style: pun, arguments: [{name: topic, type: string}]}
`, pyTopic), 0o644); err != nil {
		t.Fatal(err)
	}
	startPythonJokes(t, c, c.ServiceURL(1), pyTopic)

	// Two gateways, each given both brokers, a different one first.
	admins := c.Admin(0) + "," + c.Admin(1)
	gws := []*gateway{startGateway(t, "A", c.ServiceURL(0), admins, registry, log), startGateway(t, "B", c.ServiceURL(1), admins, registry, log)}
	for _, g := range gws {
		eventually.True(t, 60*time.Second, "gateway "+g.name+" lists the announced echo tool", func() bool { return g.hasTool("echo") })
	}
	eventually.True(t, 60*time.Second, "both gateways subscribed to the response topic", func() bool { return c.Consumers(respTopic) >= 2 })

	spyClient, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.ServiceURL(0), ConnectionTimeout: 5 * time.Second, OperationTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer spyClient.Close()
	spyCtx, spyCancel := context.WithCancel(context.Background())
	var spyWG sync.WaitGroup
	defer func() { spyCancel(); spyWG.Wait() }()
	sp := &spy{seen: map[string]int{}, misrouted: map[string]int{}}
	for _, g := range gws {
		sp.run(spyCtx, t, spyClient, g, &spyWG)
		eventually.True(t, 60*time.Second, "gateway "+g.name+" and the spy on its reply topic", func() bool { return c.Consumers(wire.ReplyTopic(g.id)) >= 2 })
		if out, err := g.invoke(t.Context(), map[string]any{"msg": "gw" + g.name + "-first"}); err != nil || out != "gw"+g.name+"-first" {
			t.Fatalf("first call through gateway %s: %q %v", g.name, out, err)
		}
		if code, body := g.get("/readyz"); code != http.StatusOK {
			t.Fatalf("gateway %s /readyz before the load: %d %s", g.name, code, body)
		}
	}

	// Steady load through both gateways: per gateway two fast echo
	// callers, one slow one and one calling the Python service.
	rec := &recorder{}
	loadCtx, loadCancel := context.WithCancel(context.Background())
	var loadWG sync.WaitGroup
	stopLoad := sync.OnceFunc(func() { loadCancel(); loadWG.Wait() })
	defer stopLoad()
	// The series of calls whose recovery is measured: echo and Python
	// calls through each of the two gateways.
	series := []string{"A", "B", "A-py", "B-py"}
	loadStart := time.Now()
	for _, g := range gws {
		for w, kind := range []int{fast, fast, slow, python} {
			loadWG.Add(1)
			go func() { defer loadWG.Done(); load(loadCtx, g, w, kind, rec) }()
		}
	}
	eventually.True(t, 60*time.Second, "the load under way (5 calls answered in each series)", answering(rec, series, loadStart, 5))
	t.Logf("the load's start: %s", window(rec.snapshot(), loadStart, time.Now()))

	// (1) The bundles of tg/request and tg/response are unloaded to the
	// other broker: the topics move under the load.
	from, err := c.Owner(reqTopic)
	if err != nil {
		t.Fatal(err)
	}
	to := 1 - from
	tUnload := time.Now()
	c.place(t, "tg/request", reqTopic, to)
	c.place(t, "tg/response", respTopic, to)
	tMoved := time.Now()
	for _, s := range series {
		eventually.True(t, 60*time.Second, "calls "+s+" succeed after the move", func() bool {
			return !recovery(rec.snapshot(), s, tMoved).IsZero()
		})
	}
	eventually.True(t, 60*time.Second, "5 more calls answered in each series", answering(rec, series, time.Now(), 5))
	calls := rec.snapshot()
	var moveRecovery time.Duration
	for _, s := range series {
		moveRecovery = max(moveRecovery, recovery(calls, s, tMoved).Sub(tUnload))
	}
	inFlight := outcomes(calls, tUnload, tMoved)
	t.Logf("unload of tg/request and tg/response to broker%d took %s; calls in flight: %v; every gateway answering again %s after the unload",
		to+1, tMoved.Sub(tUnload).Round(time.Millisecond), inFlight, moveRecovery.Round(time.Millisecond))
	// A request published while its topic moves may find no consumer and
	// be dropped; the gateway's watch sees every consumer reconnected
	// after such a call was made and ends it with UNAVAILABLE, a code the
	// caller may retry at once, instead of letting it run to its deadline.
	// A reply published while the gateway's consumer of its reply topic
	// was away is dropped as well: the watch sees that consumer connected
	// again and asks the service for the reply once more, which the Go
	// SDK sends again. TrustGraph's Python service knows neither: its
	// calls may run to their deadline.
	var dropped, replyLost, python []string
	early := 0 // ended with UNAVAILABLE though the service took them
	takenMu.Lock()
	for _, cl := range calls {
		if cl.start.Before(tMoved) && cl.end.After(tUnload) && cl.code == codes.Unavailable && taken[cl.msg] {
			early++
		}
		if cl.start.Before(tMoved) && cl.end.After(tUnload) && cl.code == codes.DeadlineExceeded {
			what := fmt.Sprintf("%s %q started %s after the unload", cl.gw, cl.msg, cl.start.Sub(tUnload).Round(time.Millisecond))
			switch {
			case cl.msg == "":
				python = append(python, what)
			case taken[cl.msg]:
				replyLost = append(replyLost, what)
			default:
				dropped = append(dropped, what)
			}
		}
	}
	takenMu.Unlock()
	t.Logf("calls in flight at the unload ended with UNAVAILABLE though the echo service had taken them: %d", early)
	if len(python) > 0 {
		t.Logf("calls to the Python service in flight at the unload that ran to their deadline: %q", python)
	}
	if len(dropped) > 0 {
		t.Errorf("calls in flight at the unload whose request never reached the service ran to their deadline instead of ending early: %q", dropped)
	}
	if len(replyLost) > 0 {
		t.Errorf("calls in flight at the unload whose reply the service sent ran to their deadline (the reply lost on the moving reply topic was not sent again): %q", replyLost)
	}
	for _, g := range gws {
		t.Logf("gateway %s after the unload: toolgate_bridge_resends_total %v", g.name, g.metric(t, "toolgate_bridge_resends_total"))
	}

	// (2) Everything the calls use (request, response and reply topics, and
	// the announcements) is put on one broker, which is then SIGKILLed.
	victim, survivor := to, from
	c.place(t, "tg/config", toolservice.DefaultAnnounceTopic, victim)
	for _, topic := range []string{reqTopic, respTopic, wire.ReplyTopic(gws[0].id), wire.ReplyTopic(gws[1].id), toolservice.DefaultAnnounceTopic} {
		if o, err := c.Owner(topic); err != nil || o != victim {
			t.Fatalf("before the kill, %s is owned by broker%d (%v), want broker%d", topic, o+1, err, victim+1)
		}
	}
	tPlaced := time.Now()
	eventually.True(t, 60*time.Second, "the load on the one broker (5 calls answered in each series)", answering(rec, series, tPlaced, 5))
	tKill := time.Now()
	spyAtKill := [2]int{sp.count("A"), sp.count("B")}
	t.Logf("the load on the one broker before the kill: %s", window(rec.snapshot(), tPlaced, tKill))
	c.kill(t, victim)
	t.Logf("SIGKILLed broker%d, owner of the request, response, reply and announcement topics", victim+1)

	var readyDuring []string
	eventually.Succeeds(t, 3*time.Minute, "the gateways recovered (10 calls answered in each series since its recovery)", func() error {
		calls := rec.snapshot()
		if len(readyDuring) == 0 && time.Since(tKill) > 2*time.Second {
			for _, g := range gws {
				code, body := g.get("/readyz")
				readyDuring = append(readyDuring, fmt.Sprintf("%s: %d %s", g.name, code, strings.TrimSpace(body)))
			}
		}
		for _, s := range series {
			if r := recovery(calls, s, tKill); r.IsZero() || okSince(calls, s, r) < 10 {
				return fmt.Errorf("calls since the kill: %v", outcomes(calls, tKill, time.Now()))
			}
		}
		return nil
	})
	calls = rec.snapshot()
	now := time.Now()
	ttr := make([]string, len(series))
	for i, s := range series {
		ttr[i] = fmt.Sprintf("%s %s", s, recovery(calls, s, tKill).Sub(tKill).Round(time.Millisecond))
	}
	var failed int
	var longest time.Duration
	for _, cl := range calls {
		if cl.start.After(tKill.Add(-callTimeout)) {
			if cl.code != codes.OK {
				failed++
			}
			if d := cl.end.Sub(cl.start); d > longest {
				longest = d
			}
		}
	}
	before, after := okRate(calls, tKill.Add(-3*time.Second), tKill), okRate(calls, now.Add(-3*time.Second), now)
	t.Logf("FAILOVER broker%d SIGKILLed: time to recovery %s (metadata-store session timeout 10 s); calls since the kill: %v; "+
		"failed %d, longest %s (deadline %s); throughput %.0f calls/s before, %.0f calls/s after",
		victim+1, strings.Join(ttr, ", "), outcomes(calls, tKill, now), failed,
		longest.Round(time.Millisecond), callTimeout, before, after)
	t.Logf("the 3 s after recovery: %s", window(calls, now.Add(-3*time.Second), now))
	t.Logf("/readyz 2 s into the outage: %s", strings.Join(readyDuring, "; "))

	// The topics are the survivor's now, and the services and gateways
	// are back on them without a restart.
	for _, topic := range []string{reqTopic, respTopic, wire.ReplyTopic(gws[0].id), wire.ReplyTopic(gws[1].id)} {
		if o, err := c.Owner(topic); err != nil || o != survivor {
			t.Errorf("after the kill, %s is owned by broker%d (%v), want broker%d", topic, o+1, err, survivor+1)
		}
	}
	eventually.True(t, 30*time.Second, "both service replicas subscribed on the survivor", func() bool { return c.Consumers(reqTopic) >= 2 })

	// (3) A gateway started after the kill finds the announcement, kept
	// on the bookie, through the survivor.
	gC := startGateway(t, "C", c.ServiceURL(survivor), admins, registry, log)
	eventually.True(t, 60*time.Second, "gateway C (started after the kill) lists the announced echo tool", func() bool { return gC.hasTool("echo") })
	eventually.True(t, 30*time.Second, "gateway C answers", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout+grace)
		defer cancel()
		out, err := gC.invoke(ctx, map[string]any{"msg": "gwC-after-kill"})
		return err == nil && out == "gwC-after-kill"
	})
	loadWG.Add(1)
	gCStart := time.Now()
	go func() { defer loadWG.Done(); load(loadCtx, gC, 0, fast, rec) }()
	eventually.True(t, 60*time.Second, "gateway C under load (5 calls answered)", answering(rec, []string{gC.name}, gCStart, 5))
	stopLoad()

	// (4) Every call ended by its deadline, each answer reached its own
	// caller, and the reply topics carried only their gateway's replies.
	calls = rec.snapshot()
	perGW := map[string]int{}
	var late, wrong int
	for _, cl := range calls {
		if cl.code == codes.OK {
			perGW[cl.gw]++
		}
		if cl.late {
			late++
			if late <= 5 {
				t.Errorf("a call through gateway %s started %s after the kill outlived its deadline (%s + %s grace): %v",
					cl.gw, cl.start.Sub(tKill).Round(time.Millisecond), callTimeout, grace, cl.code)
			}
		}
		if cl.wrong {
			wrong++
		}
		if !slices.Contains(retryable, cl.code) {
			t.Errorf("a call through gateway %s ended with %v: not a retryable outcome", cl.gw, cl.code)
		}
	}
	if wrong > 0 {
		t.Errorf("%d calls were answered with another call's output", wrong)
	}
	sp.mu.Lock()
	t.Logf("%d calls, %v successful per gateway, %d late, %d wrong; replies seen on the reply topics %v, misrouted %v",
		len(calls), perGW, late, wrong, sp.seen, sp.misrouted)
	for i, g := range gws {
		if sp.seen[g.name] <= spyAtKill[i] {
			t.Errorf("the spy saw no replies on gateway %s's reply topic after the kill (%d before it)", g.name, spyAtKill[i])
		}
	}
	if len(sp.examples) > 0 {
		t.Errorf("replies on another gateway's reply topic: %q", sp.examples)
	}
	sp.mu.Unlock()
	if perGW["C"] == 0 {
		t.Error("no call through gateway C succeeded")
	}

	for _, g := range append(gws, gC) {
		// Ready again once every response topic is subscribed: a gateway
		// started during the outage (C) may still be in its first
		// subscribe, which waits for the topics' new owner, when the load
		// ends.
		if err := eventually.Within(30*time.Second, func() error {
			if code, body := g.get("/readyz"); code != http.StatusOK || !strings.Contains(body, `"broker_connected":true`) || !strings.Contains(body, `"status":"ready"`) {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		}); err != nil {
			t.Errorf("gateway %s /readyz after the failover, 30 s on: %v", g.name, err)
		}
		total := g.metric(t, "toolgate_calls_total")
		t.Logf("gateway %s metrics: toolgate_calls_total %.0f, toolgate_bridge_orphan_replies_total %.0f, toolgate_bridge_publish_errors_total %.0f",
			g.name, total, g.metric(t, "toolgate_bridge_orphan_replies_total"), g.metric(t, "toolgate_bridge_publish_errors_total"))
		if ok := perGW[g.name] + perGW[g.name+"-py"]; total < float64(ok) {
			t.Errorf("gateway %s counts %.0f calls, fewer than the %d that succeeded through it", g.name, total, ok)
		}
	}
}
