// Command benchrun runs toolgate's benchmark matrix against a
// running Pulsar broker and writes latest.json and latest.md. bench/run.sh
// builds everything, makes sure the broker and the Python venv are there,
// runs it and draws latest.png.
//
// Modes (each a separate load-generator process, the gateway and the echo
// services separate processes too):
//
//	direct      bench/cmd/loadgen doing request/reply over Pulsar itself
//	grpc        bench/cmd/loadgen → gateway (gRPC) → Pulsar → echo-service
//	rest        bench/cmd/loadgen → gateway (HTTP/JSON) → Pulsar → echo-service
//	floor-grpc  bench/cmd/loadgen → floorgw (gRPC) → Pulsar → echo-service
//	floor-rest  bench/cmd/loadgen → floorgw (HTTP/JSON) → Pulsar → echo-service
//	python      bench/python/tg_load.py (TrustGraph's RequestResponseClient) → Pulsar → echo-service
//	grpc-quota-redis, rest-quota-redis
//	            grpc and rest on a gateway with a quota on the echo tool, its
//	            counts in a Redis started for the run (quota.go)
//
// The gateway runs as production would: API keys required (a key file
// generated for the run; loadgen sends the key), metrics and argument
// validation on. floorgw (bench/cmd/floorgw) is the floor: the smallest
// forwarder over the same path, with nothing else, fed by the same load
// generator (which sends it the same key, ignored) against the same echo
// service; what the gateway costs is read against it.
//
// For each repetition and concurrency the modes run back to back, their
// order rotated between points, so that machine drift hits them alike, and
// each gateway mode right beside its floor mode (pointOrder); each
// point's figure is the median over repetitions. The gateway is started
// afresh for each of its points, so CPU time and peak RSS belong to that
// point alone. direct and python use their own echo service and topics, so
// the idle gateway is not sent their replies.
//
// Every server gets ports free at the time it starts, and is benchmarked
// only once the process listening on them is found to be the one benchrun
// started.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/loadresult"
)

// Config is the benchmark plan.
type Config struct {
	Quick         bool     `json:"quick"`
	Repetitions   int      `json:"repetitions"`
	Concurrencies []int    `json:"concurrencies"`
	Modes         []string `json:"modes"`
	WarmupS       float64  `json:"warmup_s"`
	DurationS     float64  `json:"duration_s"`
	MsgSize       int      `json:"msg_size"`
	GRPCConns     int      `json:"grpc_conns"`
	StreamN       int      `json:"stream_n"`
	// StreamConc: streams at once in each streaming point (0 or 1: one).
	StreamConc     int     `json:"stream_concurrency,omitempty"`
	StreamReps     int     `json:"stream_repetitions"`
	StreamWarmupS  float64 `json:"stream_warmup_s"`
	StreamDurS     float64 `json:"stream_duration_s"`
	InflightCalls  int     `json:"inflight_calls"`
	InflightConns  int     `json:"inflight_conns"`
	InflightSleep  int     `json:"inflight_sleep_ms"`
	EchoConc       int     `json:"echo_concurrency"`
	FreshGateway   bool    `json:"fresh_gateway_per_point"`
	GatewayAuth    string  `json:"gateway_auth"`
	ProfileSeconds int     `json:"profile_seconds,omitempty"`
	// PacedFraction: after each repetition's closed-loop points, the
	// gateway and the floor run again at c=64 paced at this fraction of
	// the slower one's closed-loop rate in that repetition (loadgen
	// -rate), so their CPU per call is compared at the same load; 0 skips
	// it.
	PacedFraction float64 `json:"paced_fraction,omitempty"`
	// Interleave: after each repetition, at each of these concurrencies a
	// fresh gateway and a fresh floor, both up, take turns in
	// InterleaveSlices windows each (interleave.go); empty skips it.
	Interleave       []int `json:"interleave_concurrencies,omitempty"`
	InterleaveSlices int   `json:"interleave_windows,omitempty"`
	// TurnCalls and TurnSkip: with c=1 in Interleave, the pair and direct
	// also take turns call by call in one load client, TurnCalls calls a
	// turn, the first TurnSkip of each not counted (turns.go); 0 skips it.
	TurnCalls int `json:"turn_calls,omitempty"`
	TurnSkip  int `json:"turn_skip,omitempty"`
	// Doors are the gateway modes the doors phase interleaves on one
	// gateway at DoorsConcurrency (doors.go); fewer than two skip it.
	Doors            []string `json:"doors,omitempty"`
	DoorsConcurrency int      `json:"doors_concurrency,omitempty"`
	DoorsWindows     int      `json:"doors_windows,omitempty"`
	// OpsConcurrency and OpsWindows shape the operations phase (ops.go);
	// 0 skips it.
	OpsConcurrency int `json:"operations_concurrency,omitempty"`
	OpsWindows     int `json:"operations_windows,omitempty"`
}

type env struct {
	cfg       Config
	repo      string
	bin       string
	gwBin     string // gateway binary for the matrix
	profBin   string // gatewayprof binary ("" = no profiling)
	floorBin  string // floorgw binary
	python    string
	pyLoad    string
	out       string
	pulsarURL string
	adminURL  string
	tmp       string
	topicGW   string
	topicD    string
	tag       string // this run's topic prefix
	registry  string
	keysFile  string // the gateway's --api-keys
	keyFile   string // the key loadgen sends
	brokerPID int
	echoGW    *child
	echoD     *child
	gateway   *child // the server of the current point: gateway or floorgw
	gwKind    string
	gwSeq     int
	note      string
	verbose   bool
	gwArgs    string
	failures  int
	scale     string // the scaling points (scale.go): on, off, only
	streams   string // the streaming points: on, off, only
	// The quota modes' Redis (nil when not wanted or it did not start:
	// redisErr) and rules file (quota.go).
	redis      *redisServer
	redisErr   error
	quotaRules string
	cluster    string // the scale point on a two-broker cluster (cluster.go): on, off, only
}

func main() {
	e := &env{}
	var quick bool
	var reps, msgSize int
	var duration, warmup time.Duration
	var paced float64
	var concs, modes, profile, interleave, doors string
	var doorsConc, opsConc int
	var slices, turnCalls int
	fs := flag.NewFlagSet("benchrun", flag.ExitOnError)
	fs.BoolVar(&quick, "quick", false, "the development run: one repetition, short windows, no profiling (about 2 min)")
	fs.IntVar(&reps, "reps", 0, "repetitions per point (default 3; quick 1)")
	fs.DurationVar(&duration, "duration", 0, "measured window per point (default 10s; quick 2s)")
	fs.DurationVar(&warmup, "warmup", 0, "warm-up per point (default 2s; quick 0.5s)")
	fs.StringVar(&concs, "concurrency", "1,16,64,256", "concurrencies")
	fs.StringVar(&modes, "modes", "direct,grpc,rest,rest-quota-redis,mcp,connect,floor-grpc,floor-rest,python", "modes (direct, grpc, rest, mcp, connect, floor-grpc, floor-rest, python, grpc-quota-redis, rest-quota-redis)")
	var streamReps, streamN int
	var streamDur time.Duration
	fs.StringVar(&e.streams, "streams", "on", "the streaming points, one stream at a time per mode: on, off, only (nothing else)")
	fs.IntVar(&streamReps, "stream-reps", 0, "repetitions of the streaming points (default 3; quick 1)")
	fs.DurationVar(&streamDur, "stream-duration", 0, "measured window per streaming point (default 6s; quick 2s)")
	fs.IntVar(&streamN, "stream-n", 1000, "chunks per stream of the streaming points")
	var streamConc int
	fs.IntVar(&streamConc, "stream-concurrency", 1, "streams at once in each streaming point")
	fs.IntVar(&msgSize, "msg-size", 32, "bytes of the echoed message")
	fs.Float64Var(&paced, "paced", 0.6, "after each repetition, gateway and floor at c=64 paced at this fraction of the slower one's closed-loop calls/s (equal load); 0 skips")
	fs.StringVar(&interleave, "interleave", "1,64", "after each repetition, gateway and floor both up, taking turns at these concurrencies (\"off\" skips)")
	fs.IntVar(&turnCalls, "turn-calls", 100, "with c=1 interleaved: the pair and direct then also take turns in one load client, this many calls a turn (0 skips it)")
	fs.StringVar(&doors, "doors", "rest,mcp,mcp-2026,connect,grpc", "after each repetition, these doors take turns on one gateway (\"off\" skips): rest, mcp (protocol 2025-11-25), mcp-2026 (2026-07-28), connect, grpcweb, grpc")
	fs.IntVar(&doorsConc, "doors-concurrency", 64, "concurrency of the doors phase")
	fs.IntVar(&opsConc, "operations-concurrency", 16, "after each repetition, plain REST invokes and the same calls as durable operations take turns on one gateway at this concurrency (0 skips)")
	fs.IntVar(&slices, "interleave-windows", 4, "windows per server and concurrency in the interleaved phase (each -duration / this long)")
	fs.StringVar(&profile, "profile", "auto", "pprof the gateway under grpc and rest load at concurrency 64: on, off, auto (= on unless -quick)")
	fs.StringVar(&e.repo, "repo", ".", "repository root")
	fs.StringVar(&e.bin, "bin", "bin", "directory with gateway, echo-service and loadgen")
	fs.StringVar(&e.profBin, "gatewayprof", "", "gatewayprof binary (bench/cmd/gatewayprof), for profiling")
	fs.StringVar(&e.floorBin, "floor", "", "floorgw binary (bench/cmd/floorgw), for the floor modes (default: floorgw in -bin)")
	fs.StringVar(&e.python, "python", ".cache/venv/bin/python", "Python of the venv with trustgraph-base")
	fs.StringVar(&e.pyLoad, "pyload", "bench/python/tg_load.py", "the python-mode load client")
	fs.StringVar(&e.out, "out", "", "output directory (default docs/benchmarks; quick: .cache/bench/quick)")
	fs.StringVar(&e.pulsarURL, "pulsar-url", envOr("TOOLGATE_PULSAR_URL", "pulsar://127.0.0.1:"+envOr("PULSAR_BROKER_PORT", "6650")),
		"broker URL (default $TOOLGATE_PULSAR_URL, else port $PULSAR_BROKER_PORT on 127.0.0.1)")
	fs.StringVar(&e.adminURL, "admin-url", envOr("TOOLGATE_PULSAR_ADMIN_URL", "http://127.0.0.1:"+envOr("PULSAR_WEB_PORT", "8080")),
		"broker admin URL (default $TOOLGATE_PULSAR_ADMIN_URL, else port $PULSAR_WEB_PORT on 127.0.0.1)")
	fs.StringVar(&e.gwArgs, "gateway-args", "", "more gateway flags, space-separated (it always gets --api-keys <generated file> and --log-level warn)")
	fs.StringVar(&e.note, "note", "", "free text about the machine, stored with the results")
	fs.BoolVar(&e.verbose, "v", false, "print each result line")
	fs.StringVar(&e.scale, "scale", "on", "gateway replicas R = 1, 2, 4 with reply-to off and on, to scale.json/scale.md: on, off, only (nothing else)")
	fs.StringVar(&e.cluster, "cluster", "on", "with the scale phase, 2 replicas on a two-broker Pulsar cluster (scripts/pulsar-cluster.sh, started on free ports or the PULSAR_CLUSTER_*_PORT ones, and stopped at the end), topics on one broker vs spread over both, into scale.json/scale.md: on, off, only (nothing else, no broker needed; merged into the scale.json in -out)")
	var reportOnly bool
	fs.BoolVar(&reportOnly, "report-only", false, "run nothing: rebuild latest.json's summaries and latest.md from latest.json and the profile files in -out")
	_ = fs.Parse(os.Args[1:])

	c := Config{
		Quick: quick, Repetitions: 3, WarmupS: 2, DurationS: 10, MsgSize: msgSize, GRPCConns: 2,
		StreamN: streamN, StreamReps: 3, StreamWarmupS: 1, StreamDurS: 6,
		InflightCalls: 10000, InflightConns: 4, InflightSleep: 9000, EchoConc: 20000, FreshGateway: true,
		GatewayAuth: "api-key", PacedFraction: paced,
	}
	if e.cluster != "on" && e.cluster != "off" && e.cluster != "only" {
		fatalf("-cluster: want on, off or only")
	}
	if e.scale != "on" && e.scale != "off" && e.scale != "only" {
		fatalf("-scale: want on, off or only")
	}
	if e.streams != "on" && e.streams != "off" && e.streams != "only" {
		fatalf("-streams: want on, off or only")
	}
	if streamN < 1 {
		fatalf("-stream-n %d: want at least 1", streamN)
	}
	if streamConc < 1 {
		fatalf("-stream-concurrency %d: want at least 1", streamConc)
	}
	if streamConc > 1 {
		c.StreamConc = streamConc
	}
	if paced < 0 || paced > 1 {
		fatalf("-paced %v: want a fraction between 0 and 1", paced)
	}
	if quick {
		c.Repetitions, c.WarmupS, c.DurationS = 1, 0.5, 2
		c.StreamReps, c.StreamWarmupS, c.StreamDurS = 1, 0.5, 2
	}
	if reps > 0 {
		c.Repetitions = reps
	}
	if streamReps > 0 {
		c.StreamReps = streamReps
	}
	if streamDur > 0 {
		c.StreamDurS = streamDur.Seconds()
	}
	if duration > 0 {
		c.DurationS = duration.Seconds()
	}
	if warmup > 0 {
		c.WarmupS = warmup.Seconds()
	}
	var err error
	if c.Concurrencies, err = parseInts(concs); err != nil {
		fatalf("-concurrency: %v", err)
	}
	if interleave != "off" && interleave != "" {
		if c.Interleave, err = parseInts(interleave); err != nil {
			fatalf("-interleave: %v", err)
		}
		if slices < 1 {
			fatalf("-interleave-windows %d: want at least 1", slices)
		}
		c.InterleaveSlices = slices
	}
	if len(c.Interleave) > 0 && turnCalls > 0 {
		c.TurnCalls, c.TurnSkip = turnCalls, turnCalls/10
	}
	c.Modes = splitList(modes)
	for _, m := range c.Modes {
		if m != "direct" && m != "grpc" && m != "rest" && m != "mcp" && m != "connect" && m != "floor-grpc" && m != "floor-rest" && m != "python" &&
			m != "grpc"+quotaSuffix && m != "rest"+quotaSuffix {
			fatalf("-modes: unknown mode %q", m)
		}
	}
	if doors != "off" && doors != "" {
		c.Doors, c.DoorsConcurrency, c.DoorsWindows = splitList(doors), doorsConc, max(slices, 1)
		for _, d := range c.Doors {
			if d != "rest" && d != "mcp" && d != "mcp-2026" && d != "connect" && d != "grpcweb" && d != "grpc" {
				fatalf("-doors: unknown door %q", d)
			}
		}
		hasREST := false
		for _, d := range c.Doors {
			hasREST = hasREST || d == "rest"
		}
		if !hasREST {
			fatalf("-doors: the doors are compared with rest, which must be one of them")
		}
	}
	if opsConc > 0 {
		c.OpsConcurrency, c.OpsWindows = opsConc, 2*max(slices, 1)
	}
	switch profile {
	case "on":
	case "off":
		e.profBin = ""
	case "auto":
		if quick {
			e.profBin = ""
		}
	default:
		fatalf("-profile: want on, off or auto")
	}
	if e.profBin != "" {
		c.ProfileSeconds = 10
	}
	e.cfg = c
	if e.out == "" {
		e.out = filepath.Join(e.repo, "docs", "benchmarks")
		if quick {
			e.out = filepath.Join(e.repo, ".cache", "bench", "quick")
		}
	}
	e.gwBin = filepath.Join(e.bin, "gateway")
	if e.floorBin == "" {
		e.floorBin = filepath.Join(e.bin, "floorgw")
	}

	if reportOnly {
		if err := rewriteReport(e.out); err != nil {
			fatalf("%v", err)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = e.run(ctx)
	stopAll()
	if err != nil {
		fatalf("%v (logs in %s)", err, e.tmp)
	}
	if e.failures == 0 {
		_ = os.RemoveAll(e.tmp) // the processes' logs, kept only when something failed
	} else {
		logf("%d step(s) failed; the processes' logs are in %s", e.failures, e.tmp)
	}
}

func (e *env) run(ctx context.Context) error {
	t0 := time.Now()
	var err error
	if err = os.MkdirAll(e.out, 0o755); err != nil {
		return err
	}
	if e.tmp, err = os.MkdirTemp("", "toolgate-bench-"); err != nil {
		return err
	}
	logf("work dir %s (logs of the gateway and echo services)", e.tmp)
	tag := "bench-echo-" + randHex(4)
	e.tag, e.topicGW, e.topicD = tag, tag+"-gw", tag+"-d"
	if err := e.writeRegistry(); err != nil {
		return err
	}
	if err := e.writeAPIKey(); err != nil {
		return err
	}
	if e.cluster == "only" {
		return e.clusterOnly(ctx)
	}
	e.brokerPID = brokerPID(e.repo, e.pulsarURL, e.adminURL)
	if e.brokerPID == 0 {
		logf("broker process for %s not found: its CPU time is not reported", e.pulsarURL)
	} else {
		logf("broker %s: pid %d", e.pulsarURL, e.brokerPID)
	}
	if e.floorWanted() {
		if _, err := os.Stat(e.floorBin); err != nil {
			return fmt.Errorf("the floor modes need floorgw (-floor): %w", err)
		}
	}
	machine := machineInfo(e.adminURL, e.note)

	// The echo services: one behind the gateway, one for direct and python.
	if e.echoGW, err = e.startEcho("echo-gw", e.topicGW); err != nil {
		return err
	}
	if e.echoD, err = e.startEcho("echo-direct", e.topicD); err != nil {
		return err
	}

	if e.scale == "only" {
		return e.scaleRun(ctx)
	}
	rep := &Report{Config: e.cfg, Machine: machine, Date: time.Now().UTC().Format(time.RFC3339)}
	reps := e.cfg.Repetitions
	if e.streams == "only" {
		reps = 0
	}
	if reps > 0 && e.quotaWanted() {
		if e.quotaRules, err = e.writeQuotaRules(); err != nil {
			return err
		}
		if e.redis, e.redisErr = e.startRedis(ctx); e.redisErr != nil {
			logf("the quota modes' Redis: %v", e.redisErr)
		} else {
			logf("the quota modes' Redis: %s", e.redis.url)
			defer e.redis.stop()
		}
	}
	total := reps * len(e.cfg.Concurrencies) * len(e.cfg.Modes)
	n := 0
	for r := range reps {
		for ci, conc := range e.cfg.Concurrencies {
			for _, mode := range pointOrder(e.cfg.Modes, r+ci) {
				n++
				s := e.point(ctx, mode, conc, e.cfg.WarmupS, e.cfg.DurationS, 0, 0)
				s.Rep = r
				rep.Samples = append(rep.Samples, s)
				logf("[%d/%d] rep %d %-6s c=%-3d %s", n, total, r+1, mode, conc, s.line())
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
		if err := e.pacedRep(ctx, rep, r); err != nil {
			return err
		}
		if err := e.doorsRep(ctx, rep, r); err != nil {
			return err
		}
		if err := e.opsRep(ctx, rep, r); err != nil {
			return err
		}
		if err := e.interleavedRep(ctx, rep, r); err != nil {
			return err
		}
	}

	smodes := []string{"direct-stream", "grpc-stream", "rest-stream", "rest-sse"}
	if e.floorWanted() {
		smodes = append(smodes, "floor-grpc-stream")
	}
	streamReps := e.cfg.StreamReps
	if e.streams == "off" {
		streamReps = 0
	}
	for r := range streamReps {
		for _, mode := range rotate(smodes, r) {
			s := e.point(ctx, mode, max(e.cfg.StreamConc, 1), e.cfg.StreamWarmupS, e.cfg.StreamDurS, e.cfg.StreamN, 0)
			s.Rep = r
			rep.StreamSamples = append(rep.StreamSamples, s)
			logf("stream rep %d %-13s %s", r+1, mode, s.line())
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}

	if e.streams != "only" {
		e.memoryAndProfiles(ctx, rep)
	}
	rep.LoadEnd = loadAvg()
	rep.ElapsedS = round(time.Since(t0).Seconds(), 1)
	rep.summarize()
	rep.logFloor()
	if err := rep.write(e.out); err != nil {
		return err
	}
	logf("wrote %s and %s in %s", filepath.Join(e.out, "latest.json"), filepath.Join(e.out, "latest.md"), time.Since(t0).Round(time.Second))
	return nil
}

// memoryAndProfiles runs the in-flight tests (gateway and floor), the
// profiles and the scale phase into rep.
func (e *env) memoryAndProfiles(ctx context.Context, rep *Report) {
	in, err := e.inflight(ctx)
	if err != nil {
		e.failures++
		logf("inflight: %v", err)
		rep.InflightError = err.Error()
	} else {
		rep.Inflight = in
		logf("inflight: %d calls parked, RSS %s → %s: %d bytes per call (errors %d)", in.Inflight.Calls,
			mib(in.Inflight.IdleRSSBytes), mib(in.Inflight.ParkedRSSBytes), in.Inflight.BytesPerCall, in.Errors)
	}
	if e.floorWanted() {
		// With net/http/pprof: its stacks and live heap (after a forced
		// GC), which GC timing does not move as it moves RSS.
		in, err := e.inflightOn(ctx, func(ctx context.Context) (*child, error) { return e.startFloorOn(ctx, e.topicGW, true) },
			func(g *child) []string { return []string{"-pprof-url", "http://" + g.pprofAddr} })
		if err != nil {
			e.failures++
			logf("inflight on the floor: %v", err)
			rep.FloorInflightError = err.Error()
		} else {
			rep.FloorInflight = in
			logf("inflight on the floor: %d calls parked, RSS %s → %s: %d bytes per call (errors %d)", in.Inflight.Calls,
				mib(in.Inflight.IdleRSSBytes), mib(in.Inflight.ParkedRSSBytes), in.Inflight.BytesPerCall, in.Errors)
		}
	}

	if e.profBin != "" {
		bd, err := e.inflightBreakdown(ctx)
		if err != nil {
			e.failures++
			logf("inflight breakdown: %v", err)
		} else {
			rep.InflightBreakdown = bd
			logf("inflight breakdown: %d B/call: stacks %d, live heap %d, heap incl. garbage %d", bd.RSSBytesPerCall, bd.StackBytesPerCall, bd.HeapLiveBytesPerCall, bd.HeapAllocBytesPerCall)
		}
		for _, mode := range []string{"grpc", "rest"} {
			p, err := e.profile(ctx, mode, 64)
			if err != nil {
				e.failures++
				logf("profile %s: %v", mode, err)
				continue
			}
			rep.Profiles = append(rep.Profiles, p)
		}
	}
	if e.scale == "on" {
		if err := e.scaleRun(ctx); err != nil {
			e.failures++
			logf("scale: %v", err)
		}
	}
}

// rewriteReport redoes the summaries of an existing latest.json.
func rewriteReport(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "latest.json"))
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("latest.json: %w", err)
	}
	for _, p := range r.Profiles {
		base := filepath.Join(dir, fmt.Sprintf("profile-%s-c%d", p.Mode, p.Concurrency))
		if err := p.analyze("", base, base+".cpu.pb.gz", base+".allocs.pb.gz"); err != nil {
			return err
		}
	}
	r.summarize()
	r.logFloor()
	if err := r.write(dir); err != nil {
		return err
	}
	logf("rewrote %s", filepath.Join(dir, "latest.md"))
	return nil
}

func (e *env) writeRegistry() (err error) {
	e.registry, err = e.registryFor("registry.yaml", e.topicGW)
	return err
}

// registryFor writes a registry file naming the echo tool on topic.
func (e *env) registryFor(name, topic string) (string, error) {
	file := filepath.Join(e.tmp, name)
	reg := fmt.Sprintf(`# generated by bench/cmd/benchrun
tool-service:
  bench-echo:
    id: bench-echo
    topic: %s
    config-params: []
tool:
  echo:
    type: tool-service
    name: echo
    description: Echo for benchmarks (internal/echo)
    service: bench-echo
    arguments:
      - {name: msg, type: string, description: the text echoed}
      - {name: mode, type: string, description: stream or sleep}
      - {name: n, type: integer, description: chunks in stream mode}
      - {name: ms, type: integer, description: milliseconds in sleep mode}
`, topic)
	return file, os.WriteFile(file, []byte(reg), 0o644)
}

func (e *env) startEcho(name, topic string) (*child, error) {
	return e.startEchoOn(name, e.pulsarURL, topic)
}

// startEchoOn starts an echo service on topic against the brokers of
// pulsarURL.
func (e *env) startEchoOn(name, pulsarURL, topic string) (*child, error) {
	c, err := startChild(e.tmp, name, filepath.Join(e.bin, "echo-service"),
		"--pulsar-url", pulsarURL, "--id", topic, "--topic", topic, "--concurrency", strconv.Itoa(e.cfg.EchoConc))
	if err != nil {
		return nil, err
	}
	if err := c.waitLog(context.Background(), "tool service listening", 60*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// writeAPIKey makes the run's API key: a random key for loadgen, and the
// gateway's keys file holding its hash.
func (e *env) writeAPIKey() error {
	key := randHex(32)
	e.keyFile = filepath.Join(e.tmp, "api-key")
	e.keysFile = filepath.Join(e.tmp, "api-keys.yaml")
	if err := os.WriteFile(e.keyFile, []byte(key+"\n"), 0o600); err != nil {
		return err
	}
	keys := fmt.Sprintf("# generated by bench/cmd/benchrun\nkeys:\n  - {hash: %q, user: bench, roles: [bench]}\n", auth.HashKey(key))
	return os.WriteFile(e.keysFile, []byte(keys), 0o600)
}

func (e *env) floorWanted() bool {
	return slices.Contains(e.cfg.Modes, "floor-grpc") || slices.Contains(e.cfg.Modes, "floor-rest")
}

// startGateway starts bin (gateway or gatewayprof, with pprof) on free
// ports and waits until it is ready.
func (e *env) startGateway(ctx context.Context, bin string, pprof bool, extra ...string) (*child, error) {
	return e.startGatewayWith(ctx, bin, pprof, e.registry, extra...)
}

// parkingArgs let a gateway hold the in-flight test's calls on one tool
// service, as the floor does: without them all but
// --max-in-flight-per-service of them would wait for a slot and fail.
var parkingArgs = []string{"--max-in-flight-per-service", "0"}

// startGatewayWith starts a gateway with the registry file given.
func (e *env) startGatewayWith(ctx context.Context, bin string, pprof bool, registry string, extra ...string) (*child, error) {
	e.gwSeq++
	ga, ha, pa, err := freeAddrs(pprof)
	if err != nil {
		return nil, err
	}
	aa, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--grpc-addr", ga, "--http-addr", ha, "--admin-addr", aa, "--pulsar-url", e.pulsarURL,
		"--registry", registry, "--log-level", "warn", "--api-keys", e.keysFile}
	if pprof {
		args = append(args, "--pprof-addr", pa)
	}
	args = append(args, extra...)
	args = append(args, strings.Fields(e.gwArgs)...)
	c, err := e.startServer(ctx, fmt.Sprintf("gateway-%03d", e.gwSeq), bin, ga, ha, pa, args)
	if c != nil {
		c.metricsAddr = aa
	}
	return c, err
}

// startFloor starts floorgw on free ports, forwarding to the gateway's
// echo service.
func (e *env) startFloor(ctx context.Context) (*child, error) {
	return e.startFloorOn(ctx, e.topicGW, false)
}

// startFloorOn starts floorgw forwarding to the echo service on topic,
// with net/http/pprof on an address of its own when pprof is set.
func (e *env) startFloorOn(ctx context.Context, topic string, pprof bool) (*child, error) {
	e.gwSeq++
	ga, ha, pa, err := freeAddrs(pprof)
	if err != nil {
		return nil, err
	}
	args := []string{"--grpc-addr", ga, "--http-addr", ha, "--pulsar-url", e.pulsarURL, "--topic", topic}
	if pprof {
		args = append(args, "--pprof-addr", pa)
	}
	c, err := e.startServer(ctx, fmt.Sprintf("floorgw-%03d", e.gwSeq), e.floorBin, ga, ha, pa, args)
	if c != nil {
		c.metricsAddr = ha
	}
	return c, err
}

func freeAddrs(pprof bool) (grpcAddr, httpAddr, pprofAddr string, err error) {
	if grpcAddr, err = freeAddr(); err != nil {
		return
	}
	if httpAddr, err = freeAddr(); err != nil {
		return
	}
	if pprof {
		pprofAddr, err = freeAddr()
	}
	return
}

func (e *env) startServer(ctx context.Context, name, bin, grpcAddr, httpAddr, pprofAddr string, args []string) (*child, error) {
	c, err := startChild(e.tmp, name, bin, args...)
	if err != nil {
		return nil, err
	}
	c.grpcAddr, c.httpAddr, c.pprofAddr = grpcAddr, httpAddr, pprofAddr
	if err := c.waitReady(ctx, 60*time.Second); err != nil {
		c.stop(5 * time.Second)
		return nil, err
	}
	return c, nil
}

// ensureServer returns a ready server of kind ("gateway", "gateway-quota"
// or "floor") for a
// point: a fresh one, or the one already running when -fresh-gateway is
// off. Only one runs at a time, so the echo service's replies have one
// subscriber.
func (e *env) ensureServer(ctx context.Context, kind string) (*child, error) {
	if e.gateway != nil && !e.gateway.exited() && e.gwKind == kind {
		return e.gateway, nil
	}
	if e.gateway != nil {
		e.gateway.stop(15 * time.Second)
		e.gateway = nil
	}
	var g *child
	var err error
	switch kind {
	case "floor":
		g, err = e.startFloor(ctx)
	case "gateway-quota":
		var args []string
		if args, err = e.quotaArgs(); err == nil {
			g, err = e.startGateway(ctx, e.gwBin, false, args...)
		}
	default:
		g, err = e.startGateway(ctx, e.gwBin, false)
	}
	if err != nil {
		return nil, err
	}
	e.gateway, e.gwKind = g, kind
	return g, nil
}

func (e *env) releaseGateway() {
	if e.cfg.FreshGateway && e.gateway != nil {
		e.gateway.stop(15 * time.Second)
		e.gateway = nil
	}
}

// pacedRep runs, for gRPC and REST, the gateway and the floor at c=64
// paced at cfg.PacedFraction of the slower one's closed-loop calls/s in
// repetition r.
func (e *env) pacedRep(ctx context.Context, rep *Report, r int) error {
	if e.cfg.PacedFraction <= 0 {
		return nil
	}
	for _, proto := range []string{"grpc", "rest"} {
		rate := pacedRate(rep.Samples, r, proto, e.cfg.PacedFraction)
		if rate <= 0 {
			continue
		}
		for _, mode := range rotate([]string{proto, "floor-" + proto}, r) {
			s := e.point(ctx, mode, pacedConc, e.cfg.WarmupS, e.cfg.DurationS, 0, rate)
			s.Rep = r
			rep.PacedSamples = append(rep.PacedSamples, s)
			logf("paced rep %d %-10s c=%d at %.0f calls/s: %s", r+1, mode, pacedConc, rate, s.line())
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}

// pacedConc is the concurrency of the paced points.
const pacedConc = 64

// pacedRate is frac of the lower closed-loop calls/s of proto and its
// floor at pacedConc in repetition r, 0 when either is missing.
func pacedRate(samples []*Sample, r int, proto string, frac float64) float64 {
	low := math.Inf(1)
	for _, mode := range []string{proto, "floor-" + proto} {
		found := false
		for _, s := range samples {
			if s.Rep == r && s.Mode == mode && s.Concurrency == pacedConc && s.Failed == "" && s.RPS > 0 {
				low, found = min(low, s.RPS), true
			}
		}
		if !found {
			return 0
		}
	}
	return math.Round(low * frac)
}

// point runs one load point (paced when rate > 0) and never fails: a
// failure is recorded in the sample.
func (e *env) point(ctx context.Context, mode string, conc int, warmupS, durS float64, streamN int, rate float64) *Sample {
	if mode == "python" {
		return e.pythonPoint(ctx, conc, warmupS, durS)
	}
	t := target{echo: e.echoD, topic: e.topicD}
	if !strings.HasPrefix(mode, "direct") {
		kind := "gateway"
		if strings.HasPrefix(mode, "floor-") {
			kind = "floor"
		} else if plainMode(mode) != "" {
			kind = "gateway-quota"
		}
		g, err := e.ensureServer(ctx, kind)
		if err != nil {
			e.failures++
			return &Sample{Result: loadresult.Result{Mode: mode, Concurrency: conc}, Failed: err.Error()}
		}
		defer e.releaseGateway()
		t = target{srv: g, echo: e.echoGW, topic: e.topicGW}
		if kind == "gateway-quota" {
			if _, err := e.redis.do("DEL", quotaKey); err != nil {
				e.failures++
				return &Sample{Result: loadresult.Result{Mode: mode, Concurrency: conc}, Failed: "emptying the quota's count in Redis: " + err.Error()}
			}
			s := e.load(ctx, mode, conc, warmupS, durS, streamN, rate, t)
			if s.Failed == "" {
				if e.checkQuotaCounted(s); s.Failed != "" {
					e.failures++
				}
			}
			return s
		}
	}
	return e.load(ctx, mode, conc, warmupS, durS, streamN, rate, t)
}

// target is what a loadgen run calls: a server (gateway or floorgw; nil
// for the direct modes) and the echo service behind it, on topic.
type target struct {
	srv   *child
	echo  *child
	topic string
}

// load runs loadgen once against t and never fails: a failure is
// recorded in the sample.
func (e *env) load(ctx context.Context, mode string, conc int, warmupS, durS float64, streamN int, rate float64, t target) *Sample {
	s := &Sample{Result: loadresult.Result{Mode: mode, Concurrency: conc}}
	timeout := time.Duration((warmupS+durS)*float64(time.Second)) + 90*time.Second
	lgMode := strings.TrimSuffix(strings.TrimPrefix(mode, "floor-"), quotaSuffix)
	args := []string{"-mode", lgMode, "-concurrency", strconv.Itoa(conc),
		"-duration", ftoa(durS) + "s", "-warmup", ftoa(warmupS) + "s", "-pulsar-url", e.pulsarURL,
		"-msg-size", strconv.Itoa(e.cfg.MsgSize), "-conns", strconv.Itoa(e.cfg.GRPCConns)}
	if streamN > 0 {
		args = append(args, "-stream-n", strconv.Itoa(streamN))
	}
	if rate > 0 {
		args = append(args, "-rate", ftoa(rate))
	}
	watch := []string{"echo=" + strconv.Itoa(t.echo.pid())}
	if t.srv == nil {
		args = append(args, "-topic", t.topic)
	} else {
		args = append(args, "-grpc-addr", t.srv.grpcAddr, "-http-addr", t.srv.httpAddr, "-api-key-file", e.keyFile,
			"-watch-pid", strconv.Itoa(t.srv.pid()))
		if streamN == 0 {
			args = append(args, "-metrics-url", "http://"+t.srv.metricsAddr+"/metrics")
		}
	}
	if e.brokerPID != 0 {
		watch = append(watch, "broker="+strconv.Itoa(e.brokerPID))
	}
	args = append(args, "-watch", strings.Join(watch, ","))
	req0, resp0 := snapTopic(e.adminURL, "request", t.topic), snapTopic(e.adminURL, "response", t.topic)
	err := runJSON(ctx, timeout, s, filepath.Join(e.bin, "loadgen"), args...)
	s.Mode = mode
	s.LostRequests = lostBetween(req0, snapTopic(e.adminURL, "request", t.topic))
	s.LostReplies = -1
	if t.srv != nil { // the server's subscription is still there
		s.LostReplies = lostBetween(resp0, snapTopic(e.adminURL, "response", t.topic))
	}
	return e.finish(s, err)
}

// pythonPoint runs the python-mode load client (TrustGraph's own client).
func (e *env) pythonPoint(ctx context.Context, conc int, warmupS, durS float64) *Sample {
	s := &Sample{Result: loadresult.Result{Mode: "python", Concurrency: conc}}
	timeout := time.Duration((warmupS+durS)*float64(time.Second)) + 90*time.Second
	req0 := snapTopic(e.adminURL, "request", e.topicD)
	w := "echo=" + strconv.Itoa(e.echoD.pid())
	if e.brokerPID != 0 {
		w += ",broker=" + strconv.Itoa(e.brokerPID)
	}
	err := runJSON(ctx, timeout, s, e.python, e.pyLoad, "--pulsar", e.pulsarURL, "--topic", e.topicD,
		"--concurrency", strconv.Itoa(conc), "--duration", ftoa(durS), "--warmup", ftoa(warmupS),
		"--msg-size", strconv.Itoa(e.cfg.MsgSize), "--watch", w)
	s.LostRequests, s.LostReplies = lostBetween(req0, snapTopic(e.adminURL, "request", e.topicD)), -1
	return e.finish(s, err)
}

// finish records err in s, counts the failure, and lets the last replies
// drain before the next run.
func (e *env) finish(s *Sample, err error) *Sample {
	if err != nil {
		s.Failed = err.Error()
	}
	if s.Failed != "" {
		e.failures++
	}
	if e.verbose {
		fmt.Fprintf(os.Stderr, "%+v\n", *s)
	}
	time.Sleep(300 * time.Millisecond)
	return s
}

// inflight parks InflightCalls calls on a fresh gateway.
func (e *env) inflight(ctx context.Context) (*Sample, error) {
	return e.inflightOn(ctx, func(ctx context.Context) (*child, error) { return e.startGateway(ctx, e.gwBin, false, parkingArgs...) }, nil)
}

// inflightBreakdown repeats the in-flight test on gatewayprof, reading the
// Go runtime's memory statistics and a live-heap profile while parked.
func (e *env) inflightBreakdown(ctx context.Context) (*InflightBreakdown, error) {
	heap := filepath.Join(e.out, "profile-inflight.heap.pb.gz")
	s, err := e.inflightOn(ctx, func(ctx context.Context) (*child, error) { return e.startGateway(ctx, e.profBin, true, parkingArgs...) },
		func(g *child) []string { return []string{"-pprof-url", "http://" + g.pprofAddr, "-heap-out", heap} })
	if err != nil {
		return nil, err
	}
	in := s.Inflight
	if in.Idle == nil || in.Parked == nil {
		return nil, fmt.Errorf("no Go memory statistics in the result")
	}
	n := int64(in.Calls)
	bd := &InflightBreakdown{
		Calls:                 in.Calls,
		RSSBytesPerCall:       in.BytesPerCall,
		GoroutinesPerCall:     round(float64(in.Parked.Goroutines-in.Idle.Goroutines)/float64(n), 2),
		StackBytesPerCall:     (in.Parked.StackBytes - in.Idle.StackBytes) / n,
		HeapLiveBytesPerCall:  (in.Parked.HeapLive - in.Idle.HeapLive) / n,
		HeapAllocBytesPerCall: (in.Parked.HeapAlloc - in.Idle.HeapAlloc) / n,
	}
	top, err := pprofTop(e.profBin, heap, "-sample_index=inuse_space", "-nodecount=25")
	if err == nil {
		txt := filepath.Join(e.out, "profile-inflight.txt")
		if err := os.WriteFile(txt, []byte("# Live heap with the calls parked (inuse_space)\n"+top), 0o644); err == nil {
			bd.Files = []string{filepath.Base(txt), filepath.Base(heap)}
		}
		for i, f := range parseTop(top) {
			if i >= 12 {
				break
			}
			bd.TopLive = append(bd.TopLive, FnAlloc{Func: f[4], Flat: f[0], FlatPct: pct(f[1]), Cum: f[2], CumPct: pct(f[3])})
		}
	}
	return bd, nil
}

func (e *env) inflightOn(ctx context.Context, start func(context.Context) (*child, error), lgExtra func(*child) []string) (*Sample, error) {
	g, err := start(ctx)
	if err != nil {
		return nil, err
	}
	defer g.stop(30 * time.Second)
	s := &Sample{}
	timeout := time.Duration(e.cfg.InflightSleep)*time.Millisecond + 2*time.Minute
	req0, resp0 := snapTopic(e.adminURL, "request", e.topicGW), snapTopic(e.adminURL, "response", e.topicGW)
	defer func() {
		s.LostRequests = lostBetween(req0, snapTopic(e.adminURL, "request", e.topicGW))
		s.LostReplies = lostBetween(resp0, snapTopic(e.adminURL, "response", e.topicGW))
	}()
	args := []string{"-mode", "inflight",
		"-concurrency", strconv.Itoa(e.cfg.InflightCalls), "-conns", strconv.Itoa(e.cfg.InflightConns),
		"-sleep-ms", strconv.Itoa(e.cfg.InflightSleep), "-grpc-addr", g.grpcAddr, "-api-key-file", e.keyFile, "-topic", e.topicGW,
		"-admin-url", e.adminURL, "-watch-pid", strconv.Itoa(g.pid())}
	if lgExtra != nil {
		args = append(args, lgExtra(g)...)
	}
	err = runJSON(ctx, timeout, s, filepath.Join(e.bin, "loadgen"), args...)
	if err != nil {
		return nil, err
	}
	if s.Inflight == nil {
		return nil, fmt.Errorf("loadgen printed no inflight result")
	}
	return s, nil
}

// pointOrder is the order of the modes at the k-th point: a gateway mode
// and its floor run back to back, as one unit, so that both see the same
// state of the machine and follow the same mode (a rotation alone keeps
// the cyclic order: with direct before grpc, the gateway would always run
// right after the heaviest load on the broker, and the floor never). The
// units rotate by k, and the pair's own order flips with k. A quota mode
// joins the unit of its plain mode, next to it.
func pointOrder(modes []string, k int) []string {
	var units [][]string
	for _, m := range modes {
		if g, ok := strings.CutPrefix(m, "floor-"); ok && slices.Contains(modes, g) {
			continue // runs with its gateway mode
		}
		if p := plainMode(m); p != "" && slices.Contains(modes, p) {
			continue // runs with its plain mode
		}
		u := []string{m}
		if slices.Contains(modes, "floor-"+m) {
			u = append(u, "floor-"+m)
			if k%2 == 1 {
				u[0], u[1] = u[1], u[0]
			}
		}
		if q := m + quotaSuffix; slices.Contains(modes, q) {
			// next to the plain mode, on the side away from the floor,
			// before it or after it as the pair flips
			if k%2 == 1 {
				u = append(u, q)
			} else {
				u = append([]string{q}, u...)
			}
		}
		units = append(units, u)
	}
	var out []string
	for _, u := range rotate(units, k) {
		out = append(out, u...)
	}
	return out
}

func rotate[T any](xs []T, k int) []T {
	out := make([]T, 0, len(xs))
	for i := range xs {
		out = append(out, xs[(i+k)%len(xs)])
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s benchrun: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchrun: "+format+"\n", args...)
	os.Exit(1)
}
