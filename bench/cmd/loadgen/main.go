// Command loadgen drives load (a closed loop, or paced with -rate) at a
// toolgate gateway, or straight at a tool service over Pulsar, and prints
// one JSON result on stdout.
//
//	loadgen -mode grpc -concurrency 64 -duration 10s -warmup 2s
//
// Modes:
//
//	direct         request/reply over Pulsar itself (internal/transport, the
//	               same envelope and properties the gateway sends): the limit
//	               for this architecture
//	grpc, rest     InvokeTool through the gateway, over gRPC or HTTP/JSON
//	direct-stream, grpc-stream, rest-stream (NDJSON), rest-sse (Server-Sent Events)
//	               one streamed reply of -stream-n chunks per call
//	inflight       -concurrency calls parked on a slow echo at once, over a
//	               few gRPC connections; reports the gateway's RSS growth per
//	               parked call (needs -watch-pid)
//
// Each of -concurrency workers calls in a loop; with -rate R the calls start
// R per second in all, paced, so two servers can be compared at the same
// load (as long as fewer than -concurrency calls are in flight; beyond that
// it is a closed loop again). Calls that complete within
// the -duration window after -warmup count; the rest is warm-up or drain.
// With -watch-pid the gateway's CPU time (utime+stime from /proc) over the
// window and its largest RSS during it are reported too; -watch adds other
// processes (the echo service, the broker) to see where a call's CPU goes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/loadresult"
	"golang.org/x/time/rate"
)

// Options are the command-line settings.
type Options struct {
	Mode        string
	Concurrency int
	Duration    time.Duration
	Warmup      time.Duration
	GRPCAddr    string
	HTTPAddr    string
	PulsarURL   string
	AdminURL    string
	Topic       string
	Tool        string
	MsgSize     int
	Conns       int
	StreamN     int
	Timeout     time.Duration
	WatchPID    int
	Watch       string
	watch       map[string]int
	SleepMS     int
	RampRate    int
	Settle      time.Duration
	PprofURL    string
	HeapOut     string
	APIKeyFile  string
	APIKey      string
	MetricsURL  string
	// Rate paces the workers to this many calls per second in all (0:
	// each worker calls again as soon as its call returns).
	Rate float64
	// Turns, when set, names the targets that take turns (turns.go).
	Turns string
	// TurnCalls are the calls of each turn, TurnSkip those of them not
	// counted.
	TurnCalls, TurnSkip int
}

// The result format, shared with the benchmark orchestrator.
type (
	Result     = loadresult.Result
	ProcResult = loadresult.ProcResult
	Inflight   = loadresult.Inflight
	Turn       = loadresult.Turn
	GoMem      = loadresult.GoMem
)

func main() {
	var o Options
	fs := flag.NewFlagSet("loadgen", flag.ExitOnError)
	fs.StringVar(&o.Mode, "mode", "grpc", "direct | grpc | rest | connect | grpcweb | direct-stream | grpc-stream | rest-stream (NDJSON) | rest-sse | connect-stream | mcp (protocol 2025-11-25) | mcp-2026 (protocol 2026-07-28) | operation (REST :start, then :wait until done; the gateway needs --operations) | inflight")
	fs.IntVar(&o.Concurrency, "concurrency", 16, "calls in flight at once (workers); for inflight: calls to park")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "measured window")
	fs.DurationVar(&o.Warmup, "warmup", 2*time.Second, "load before the window, not counted")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", "127.0.0.1:19090", "gateway gRPC address")
	fs.StringVar(&o.HTTPAddr, "http-addr", "127.0.0.1:18081", "gateway HTTP address")
	fs.StringVar(&o.PulsarURL, "pulsar-url", envOr("TOOLGATE_PULSAR_URL", "pulsar://127.0.0.1:6650"), "broker URL (direct modes)")
	fs.StringVar(&o.AdminURL, "admin-url", envOr("TOOLGATE_PULSAR_ADMIN_URL", "http://127.0.0.1:8080"), "broker admin URL (inflight: confirms the calls reached Pulsar)")
	fs.StringVar(&o.Topic, "topic", "echo", "short topic of the echo service (direct modes; inflight: its request topic is checked)")
	fs.StringVar(&o.Tool, "tool", "echo", "tool name at the gateway")
	fs.IntVar(&o.MsgSize, "msg-size", 32, "bytes of the echoed message")
	fs.IntVar(&o.Conns, "conns", 2, "gRPC connections (workers take them in turn)")
	fs.IntVar(&o.StreamN, "stream-n", 1000, "chunks per streamed reply")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "deadline of each call (a lost message costs its worker this long)")
	fs.IntVar(&o.WatchPID, "watch-pid", 0, "process (the gateway) whose CPU time and RSS to report")
	fs.StringVar(&o.Watch, "watch", "", "more processes to report on, as name=pid,name=pid (e.g. echo=…,broker=…)")
	fs.IntVar(&o.SleepMS, "sleep-ms", 9000, "inflight: how long the echo service holds each call")
	fs.IntVar(&o.RampRate, "ramp-rate", 2500, "inflight: calls started per second")
	fs.DurationVar(&o.Settle, "settle", 1500*time.Millisecond, "inflight: wait after the last call reached the broker before sampling RSS")
	fs.StringVar(&o.PprofURL, "pprof-url", "", "inflight: the gateway's net/http/pprof base URL (bench/cmd/gatewayprof), to split its memory into stacks and heap")
	fs.StringVar(&o.HeapOut, "heap-out", "", "inflight with -pprof-url: save the gateway's heap profile (live objects) with all calls parked here")
	fs.StringVar(&o.APIKeyFile, "api-key-file", "", "file holding an API key, sent with every gRPC and REST call as Authorization: Bearer <key>")
	fs.StringVar(&o.MetricsURL, "metrics-url", "", "the gateway's Prometheus /metrics URL: report its heap allocations (go_memstats_mallocs_total) and garbage collections (go_gc_duration_seconds_count) per call over the window")
	fs.StringVar(&o.Turns, "turns", "", "targets taking turns, NAME=MODE@ADDRESS comma-separated (ADDRESS: gRPC or HTTP address, or the echo service's short topic for direct): each worker calls them in turn and each one's latency is reported apart (turns in the result); -mode is then ignored")
	fs.IntVar(&o.TurnCalls, "turn-calls", 1, "with -turns: calls a worker makes to one target before the next one's turn")
	fs.IntVar(&o.TurnSkip, "turn-skip", 0, "with -turns: the first calls of each turn not counted (the target warming up after its rest)")
	fs.Float64Var(&o.Rate, "rate", 0, "calls per second over all workers, paced (open loop up to -concurrency calls in flight); 0, the default, is a closed loop")
	_ = fs.Parse(os.Args[1:])
	if o.APIKeyFile != "" {
		b, err := os.ReadFile(o.APIKeyFile)
		if err != nil {
			fatalf("-api-key-file: %v", err)
		}
		if o.APIKey = strings.TrimSpace(string(b)); o.APIKey == "" {
			fatalf("-api-key-file %s is empty", o.APIKeyFile)
		}
	}
	if o.Concurrency < 1 || o.Duration <= 0 || o.Warmup < 0 || o.MsgSize < 1 || o.Conns < 1 || o.StreamN < 1 {
		fatalf("bad flags: concurrency, duration, msg-size, conns and stream-n must be positive")
	}
	if o.TurnCalls < 1 || o.TurnSkip < 0 || o.TurnSkip >= o.TurnCalls {
		fatalf("bad flags: -turn-calls must be positive and -turn-skip below it")
	}
	if o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) {
		fatalf("bad flags: -rate must be a non-negative number of calls per second")
	}
	var err error
	if o.watch, err = parseWatch(o.Watch, o.WatchPID); err != nil {
		fatalf("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var res *Result
	switch {
	case o.Turns != "":
		res, err = runTurns(ctx, o)
	case o.Mode == "inflight":
		res, err = runInflight(ctx, o)
	default:
		var c Caller
		c, err = newCaller(ctx, o)
		if err != nil {
			fatalf("%s: %v", o.Mode, err)
		}
		res, err = runLoad(ctx, o, c)
		c.Close()
	}
	if err != nil {
		fatalf("%s: %v", o.Mode, err)
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(res); err != nil {
		fatalf("%v", err)
	}
}

// Caller makes one call and returns the number of reply chunks received.
type Caller interface {
	Call(ctx context.Context, worker int) (chunks int, err error)
	Close()
}

func newCaller(ctx context.Context, o Options) (Caller, error) {
	msg := message(o.MsgSize)
	switch o.Mode {
	case "direct":
		return newDirect(ctx, o, msg, false)
	case "direct-stream":
		return newDirect(ctx, o, msg, true)
	case "grpc":
		return newGRPC(o, msg, false)
	case "grpc-stream":
		return newGRPC(o, msg, true)
	case "rest":
		return newREST(o, msg, false, false), nil
	case "rest-stream":
		return newREST(o, msg, true, false), nil
	case "rest-sse":
		return newREST(o, msg, true, true), nil
	case "mcp":
		return newMCP(o, msg, false), nil
	case "mcp-2026":
		return newMCP(o, msg, true), nil
	case "connect":
		return newConnect(o, msg, false, false)
	case "connect-stream":
		return newConnect(o, msg, true, false)
	case "grpcweb":
		return newConnect(o, msg, false, true)
	case "operation":
		return newOperation(o, msg), nil
	}
	return nil, fmt.Errorf("unknown mode %q", o.Mode)
}

// message is the echoed text: printable, no characters JSON escapes.
func message(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var sb strings.Builder
	for i := range n {
		sb.WriteByte(alphabet[i%len(alphabet)])
	}
	return sb.String()
}

type workerStats struct {
	lat          []time.Duration
	chunks       int
	errors       int
	warmupErrors int
	samples      []string
}

// runLoad runs o.Concurrency workers until the window ends and summarizes.
func runLoad(ctx context.Context, o Options, c Caller) (*Result, error) {
	t0 := time.Now()
	winStart := t0.Add(o.Warmup)
	winEnd := winStart.Add(o.Duration)
	if w, ok := c.(interface{ window(start, end time.Time) }); ok {
		w.window(winStart, winEnd)
	}
	stats := make([]workerStats, o.Concurrency)

	var allocs *allocProbe
	if o.MetricsURL != "" {
		var err error
		if allocs, err = newAllocProbe(ctx, o.MetricsURL); err != nil {
			return nil, err
		}
	}
	watch := startWatch(o.watch, allocs, winStart, winEnd)
	var wg sync.WaitGroup
	// Workers start spread over the first half of the warm-up (1 s at
	// most): a burst of hundreds of simultaneous first calls is not what
	// a closed loop looks like later, and non-persistent topics drop
	// messages when a burst outruns a consumer.
	ramp := min(o.Warmup/2, time.Second)
	// With -rate, every call first takes its turn from one pacer: calls
	// start at the rate asked for as long as fewer than o.Concurrency are
	// in flight.
	var pace *rate.Limiter
	if o.Rate > 0 {
		pace = rate.NewLimiter(rate.Limit(o.Rate), 1)
	}
	for w := range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stats[w]
			st.lat = make([]time.Duration, 0, 1024)
			time.Sleep(ramp * time.Duration(w) / time.Duration(o.Concurrency))
			for ctx.Err() == nil {
				if pace != nil && pace.Wait(ctx) != nil {
					return
				}
				start := time.Now()
				if !start.Before(winEnd) {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, o.Timeout)
				n, err := c.Call(cctx, w)
				cancel()
				end := time.Now()
				inWindow := !end.Before(winStart) && !end.After(winEnd)
				switch {
				case err != nil && inWindow:
					st.errors++
					if len(st.samples) < 3 {
						st.samples = append(st.samples, err.Error())
					}
				case err != nil:
					st.warmupErrors++
					if len(st.samples) < 3 {
						st.samples = append(st.samples, "(outside window) "+err.Error())
					}
				case inWindow:
					st.lat = append(st.lat, end.Sub(start))
					st.chunks += n
				}
				if err != nil && ctx.Err() == nil {
					// Do not spin on a broken target.
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	var all []time.Duration
	res := &Result{Mode: o.Mode, Concurrency: o.Concurrency, DurationS: o.Duration.Seconds(), WarmupS: o.Warmup.Seconds(), Rate: o.Rate}
	for i := range stats {
		all = append(all, stats[i].lat...)
		res.Chunks += stats[i].chunks
		res.Errors += stats[i].errors
		res.WarmupErrors += stats[i].warmupErrors
		for _, s := range stats[i].samples {
			if len(res.ErrorSamples) < 5 && !slices.Contains(res.ErrorSamples, s) {
				res.ErrorSamples = append(res.ErrorSamples, s)
			}
		}
	}
	summarize(res, all, o.Duration)
	procs, clientCPU, err := watch.result(res.Calls)
	if err != nil {
		return nil, err
	}
	res.ClientCPUS = clientCPU
	if len(procs) > 0 {
		res.Procs = procs
		res.Gateway = procs["gateway"]
	}
	if strings.HasSuffix(o.Mode, "-stream") || o.Mode == "rest-sse" {
		res.WindowChunksPerS = round(float64(res.Chunks)/o.Duration.Seconds(), 1)
		if res.P50 > 0 {
			res.ChunksPerS = round(float64(o.StreamN)/(res.P50/1000), 1)
		}
	} else {
		res.Chunks = 0
	}
	return res, nil
}

func summarize(res *Result, lat []time.Duration, window time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.Calls = len(lat)
	res.RPS = round(float64(len(lat))/window.Seconds(), 1)
	if len(lat) == 0 {
		return
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	res.P50 = ms(percentile(lat, 0.50))
	res.P90 = ms(percentile(lat, 0.90))
	res.P99 = ms(percentile(lat, 0.99))
	res.P999 = ms(percentile(lat, 0.999))
	res.Max = ms(lat[len(lat)-1])
	res.Mean = ms(sum / time.Duration(len(lat)))
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(float64(len(sorted))*q+0.999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

func round(f float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	if f < 0 {
		return -float64(int64(-f*p+0.5)) / p
	}
	return float64(int64(f*p+0.5)) / p
}

// watcher samples the CPU time of named processes at the window's edges,
// their RSS during the window, and loadgen's own CPU time.
type watcher struct {
	procs  map[string]int
	allocs *allocProbe
	err    error
	done   chan struct{}
	self0  float64
	self1  float64
	cpu0   map[string]float64
	out    map[string]*ProcResult
	// mallocs: the gateway's heap allocations over the window, less what
	// one scrape of its /metrics allocates; gcCycles: its collections over
	// the window, -1 when it does not report them.
	mallocs, gcCycles int64
	// published, hedged: the gateway's requests published to the bus, and
	// published again for a silence, over the window; -1 when it does not
	// report them (the floor).
	published, hedged int64
}

func startWatch(procs map[string]int, allocs *allocProbe, winStart, winEnd time.Time) *watcher {
	w := &watcher{procs: procs, allocs: allocs, done: make(chan struct{}), cpu0: map[string]float64{}, out: map[string]*ProcResult{}}
	go func() {
		defer close(w.done)
		time.Sleep(time.Until(winStart))
		var m0 counters
		if allocs != nil {
			if m0, w.err = allocs.read(); w.err != nil {
				return
			}
		}
		w.self0, _ = procCPU(os.Getpid())
		for name, pid := range procs {
			cpu, err := procCPU(pid)
			if err != nil {
				fmt.Fprintf(os.Stderr, "loadgen: watching %s (pid %d): %v\n", name, pid, err)
				continue
			}
			w.cpu0[name] = cpu
			w.out[name] = &ProcResult{PID: pid}
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, p := range w.out {
				if rss, _, err := procMem(p.PID); err == nil && rss > p.PeakRSSBytes {
					p.PeakRSSBytes = rss
				}
			}
			if !time.Now().Before(winEnd) {
				break
			}
			<-tick.C
		}
		w.self1, _ = procCPU(os.Getpid())
		if allocs != nil {
			m1, err := allocs.read()
			if err != nil {
				w.err = err
				return
			}
			w.mallocs = m1.mallocs - m0.mallocs - allocs.scrapeCost
			w.gcCycles, w.published, w.hedged = -1, -1, -1
			if m0.gcCycles >= 0 && m1.gcCycles >= 0 {
				w.gcCycles = m1.gcCycles - m0.gcCycles
			}
			if m0.published >= 0 && m1.published >= 0 {
				w.published = m1.published - m0.published
			}
			if m0.hedged >= 0 && m1.hedged >= 0 {
				w.hedged = m1.hedged - m0.hedged
			}
		}
		for name, p := range w.out {
			cpu, err := procCPU(p.PID)
			if err != nil {
				fmt.Fprintf(os.Stderr, "loadgen: watching %s (pid %d): %v\n", name, p.PID, err)
				delete(w.out, name)
				continue
			}
			p.CPUS = round(cpu-w.cpu0[name], 3)
			_, p.HWMBytes, _ = procMem(p.PID)
		}
	}()
	return w
}

// result waits for the window to end; calls completed in it give the
// per-call CPU cost.
func (w *watcher) result(calls int) (map[string]*ProcResult, float64, error) {
	<-w.done
	if w.err != nil {
		return nil, 0, fmt.Errorf("allocations: %w", w.err)
	}
	for _, p := range w.out {
		if calls > 0 {
			p.CPUSPer1kCall = round(p.CPUS*1000/float64(calls), 4)
		}
	}
	if g := w.out["gateway"]; g != nil && w.allocs != nil {
		g.Mallocs, g.MallocsScrape = w.mallocs, w.allocs.scrapeCost
		if calls > 0 {
			g.MallocsPerCall = round(float64(w.mallocs)/float64(calls), 1)
			if w.gcCycles >= 0 {
				g.GCCycles, g.GCPer10kCalls = w.gcCycles, round(float64(w.gcCycles)*10000/float64(calls), 2)
			}
			if w.published >= 0 {
				v := round(float64(w.published)/float64(calls), 4)
				g.PublishedPerCall = &v
			}
			if w.hedged >= 0 {
				v := round(float64(w.hedged)/float64(calls), 4)
				g.HedgedPerCall = &v
			}
		}
	}
	return w.out, round(w.self1-w.self0, 3), nil
}

// parseWatch reads "name=pid,name=pid".
func parseWatch(s string, gatewayPID int) (map[string]int, error) {
	m := map[string]int{}
	if gatewayPID != 0 {
		m["gateway"] = gatewayPID
	}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, v, ok := strings.Cut(item, "=")
		var pid int
		if _, err := fmt.Sscan(v, &pid); !ok || err != nil || pid <= 0 {
			return nil, fmt.Errorf("-watch %q: want name=pid", item)
		}
		m[name] = pid
	}
	return m, nil
}

// clockTicks is USER_HZ, 100 on every Linux platform Go supports.
const clockTicks = 100

// procCPU returns utime+stime of pid in seconds.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: fields
	// after the last ')' start at field 3 (state).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return 0, err
	}
	return float64(ut+st) / clockTicks, nil
}

// procMem returns VmRSS and VmHWM of pid in bytes.
func procMem(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var kb int64
		switch k {
		case "VmRSS":
			_, err = fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			rss = kb * 1024
		case "VmHWM":
			_, err = fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			hwm = kb * 1024
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return rss, hwm, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "loadgen: "+format+"\n", args...)
	os.Exit(1)
}
