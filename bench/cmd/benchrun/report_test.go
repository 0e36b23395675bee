package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/loadresult"
)

func sample(mode string, c int, rps, p50, p99, cpu1k, mallocs float64) *Sample {
	s := &Sample{Result: loadresult.Result{Mode: mode, Concurrency: c, RPS: rps, P50: p50, P99: p99, Calls: 1000}}
	if cpu1k > 0 {
		s.Gateway = &loadresult.ProcResult{CPUSPer1kCall: cpu1k, MallocsPerCall: mallocs}
	}
	return s
}

func TestSummarizeFloor(t *testing.T) {
	r := &Report{Config: Config{Concurrencies: []int{1, 64}}}
	r.Samples = []*Sample{
		sample("direct", 1, 1500, 0.6, 2, 0, 0),
		sample("grpc", 1, 800, 1.2, 3.5, 0.6, 240),
		sample("floor-grpc", 1, 900, 0.9, 3, 0.4, 200),
		sample("rest", 1, 700, 1.1, 3, 0.5, 300),
		sample("floor-rest", 1, 900, 0.62, 2.5, 0.4, 150), // added 0.02 ms: too small to divide by
		sample("direct", 64, 12000, 5, 13, 0, 0),
		sample("grpc", 64, 4600, 13, 28, 0.15, 170),
		sample("floor-grpc", 64, 6000, 10, 20, 0.1, 136),
		sample("rest", 64, 3800, 15, 35, 0.22, 250),
		sample("floor-rest", 64, 6500, 9, 18, 0.1, 100),
	}
	for _, s := range r.Samples[5:] {
		if s.Gateway != nil { // GCs per 10k calls at c=64: gateway 9, floor 18
			s.Gateway.GCCycles = 9
			if strings.HasPrefix(s.Mode, "floor") {
				s.Gateway.GCCycles = 18
			}
			s.Gateway.GCPer10kCalls = float64(s.Gateway.GCCycles)
		}
	}
	r.Inflight = &Sample{Result: loadresult.Result{Inflight: &loadresult.Inflight{BytesPerCall: 16000}}}
	r.FloorInflight = &Sample{Result: loadresult.Result{Inflight: &loadresult.Inflight{BytesPerCall: 12800}}}
	r.summarize()

	want := map[string]float64{
		"cpu_vs_floor_grpc":            1.5,
		"cpu_vs_floor_rest":            2.2,
		"mallocs_vs_floor_grpc":        1.25,
		"mallocs_vs_floor_rest":        2.5,
		"p50_added_vs_floor_c1":        2, // (1.2-0.6) / (0.9-0.6)
		"grpc_p50_over_floor_ms_c1":    0.3,
		"rest_p50_over_floor_ms_c1":    0.48,
		"mem_per_parked_call_vs_floor": 1.25,
		"grpc_over_direct_rps_c64":     0.383, // kept as a ratio
	}
	for k, v := range want {
		got, ok := r.Ratios[k].(float64)
		if !ok || got != v {
			t.Errorf("ratios[%s] = %v, want %v", k, r.Ratios[k], v)
		}
	}
	if _, ok := r.Ratios["p50_added_vs_floor_c1_rest"]; ok {
		t.Errorf("p50_added_vs_floor_c1_rest set although the floor added only 0.02 ms: %v", r.Ratios["p50_added_vs_floor_c1_rest"])
	}
	if len(r.Floor) != 4 {
		t.Fatalf("%d floor rows, want 4 (2 protocols × 2 concurrencies)", len(r.Floor))
	}
	// Only the goals in force, and only those this run measured.
	if len(r.Goals) != 1 || r.Goals[0].Ratio != "mem_per_parked_call_vs_floor" || r.Goals[0].Measured != 1.25 || !r.Goals[0].Met {
		t.Errorf("goals %+v, want only memory per parked call, 1.25, met", r.Goals)
	}
	md := r.markdown()
	for _, s := range []string{"## Against the floor", "| grpc | 64 | 0.150 | 0.100 | 1.50 | 170 | 136 | 1.25 | 9.00 | 18.00 |", "| grpc | 1 | 0.600 | 0.400 | 1.50 | 240 | 200 | 1.20 | – | – |", "1.25× the floor's memory", "## Goals in force", "| memory per parked call ÷ the floor's (`mem_per_parked_call_vs_floor`) | 1.25× | 1.25× | yes |", "(`cpu_vs_floor_grpc_interleaved`) | 1.15× | not measured in this run | – |"} {
		if !strings.Contains(md, s) {
			t.Errorf("latest.md lacks %q", s)
		}
	}
}

// The parked memory read by the Go runtimes after a forced GC: stacks and
// live heap of the gateway (gatewayprof's run) over the floor's.
func TestParkedLiveMemory(t *testing.T) {
	r := &Report{Config: Config{Concurrencies: []int{64}}}
	r.Inflight = &Sample{Result: loadresult.Result{Inflight: &loadresult.Inflight{BytesPerCall: 24000}}}
	r.InflightBreakdown = &InflightBreakdown{Calls: 1000, StackBytesPerCall: 16384, HeapLiveBytesPerCall: 5000, GoroutinesPerCall: 1}
	r.FloorInflight = &Sample{Result: loadresult.Result{Inflight: &loadresult.Inflight{Calls: 1000, BytesPerCall: 14000,
		Idle:   &loadresult.GoMem{Goroutines: 10, StackBytes: 100_000, HeapLive: 1_000_000, HeapAlloc: 2_000_000},
		Parked: &loadresult.GoMem{Goroutines: 1010, StackBytes: 8_292_000, HeapLive: 5_000_000, HeapAlloc: 8_000_000}}}}
	r.summarize()
	if got := r.Ratios["mem_live_per_parked_call_vs_floor"]; got != 1.754 { // (16384+5000) / (8192+4000)
		t.Errorf("mem_live_per_parked_call_vs_floor = %v, want 1.754", got)
	}
	md := r.markdown()
	for _, s := range []string{"| goroutine stacks (goroutines per call: gateway 1.00, floor 1.00) | 16384 | 8192 |", "| stacks + live heap | 21384 | 12192 |", "**1.754×**"} {
		if !strings.Contains(md, s) {
			t.Errorf("latest.md lacks %q", s)
		}
	}
}

// The paired ratio divides within each repetition, so a machine that got
// faster between repetitions does not skew it as the ratio of medians can.
func TestPairedCPURatio(t *testing.T) {
	r := &Report{Config: Config{Concurrencies: []int{64}}}
	rep := func(s *Sample, n int) *Sample { s.Rep = n; return s }
	r.Samples = []*Sample{
		// CPU per call of a real run whose machine got faster between
		// repetitions: in each repetition the gateway costs 1.13×, 1.26×
		// and 1.03× the floor; the medians (0.086, 0.068) say 1.265×.
		rep(sample("grpc", 64, 7000, 8, 20, 0.103, 170), 1),
		rep(sample("floor-grpc", 64, 7800, 8, 18, 0.091, 140), 1),
		rep(sample("grpc", 64, 8800, 7, 17, 0.086, 170), 2),
		rep(sample("floor-grpc", 64, 9700, 6, 16, 0.068, 140), 2),
		rep(sample("grpc", 64, 10400, 6, 15, 0.069, 170), 3),
		rep(sample("floor-grpc", 64, 9800, 6, 16, 0.067, 140), 3),
		rep(sample("floor-grpc", 64, 9800, 6, 16, 0.050, 140), 4), // no gateway sample to pair with
	}
	r.summarize()
	if got, _ := r.Ratios["cpu_vs_floor_grpc_paired"].(float64); got != 1.132 {
		t.Errorf("paired ratio = %v, want 1.132 (0.103 / 0.091)", r.Ratios["cpu_vs_floor_grpc_paired"])
	}
	if _, ok := r.Ratios["cpu_vs_floor_rest_paired"]; ok {
		t.Error("a paired REST ratio without REST samples")
	}
}

// The equal-load ratio divides within each repetition and ignores a
// repetition whose pair is incomplete.
func TestSummarizePaced(t *testing.T) {
	r := &Report{Config: Config{Concurrencies: []int{64}, PacedFraction: 0.8}}
	paced := func(mode string, rep int, rate, rps, cpu1k float64) *Sample {
		s := sample(mode, 64, rps, 5, 9, cpu1k, 150)
		s.Rep, s.Rate = rep, rate
		s.Gateway.GCCycles, s.Gateway.GCPer10kCalls = 10, 10
		return s
	}
	r.PacedSamples = []*Sample{
		paced("grpc", 0, 4000, 3990, 0.11), paced("floor-grpc", 0, 4000, 3995, 0.10),
		paced("grpc", 1, 4200, 4190, 0.12), paced("floor-grpc", 1, 4200, 4199, 0.10),
		paced("grpc", 2, 4400, 4390, 0.13), paced("floor-grpc", 2, 4400, 4399, 0.10),
		paced("rest", 0, 3000, 2990, 0.2), // its floor failed: no REST row
	}
	r.Samples = []*Sample{sample("grpc", 64, 5000, 13, 28, 0.1, 170), sample("floor-grpc", 64, 5500, 10, 20, 0.09, 136)}
	r.summarize()
	if len(r.Paced) != 1 || r.Paced[0].Protocol != "grpc" {
		t.Fatalf("paced rows %+v, want one for grpc", r.Paced)
	}
	p := r.Paced[0]
	if *p.CPURatio != 1.2 || p.Rate != 4200 || len(p.Ratios) != 3 || p.Toolgate.CPUMSPerCall != 0.12 || p.Floor.CPUMSPerCall != 0.1 {
		t.Fatalf("paced row %+v (ratio %v)", p, *p.CPURatio)
	}
	if got := r.Ratios["cpu_vs_floor_grpc_equal_load"]; got != 1.2 {
		t.Fatalf("cpu_vs_floor_grpc_equal_load = %v, want 1.2", got)
	}
	if _, ok := r.Ratios["cpu_vs_floor_rest_equal_load"]; ok {
		t.Fatal("REST equal-load ratio set without a floor sample")
	}
	if md := r.markdown(); !strings.Contains(md, "| grpc | 4200 | 0.120 | 0.100 | 1.20 (1.10, 1.20, 1.30) |") {
		t.Errorf("latest.md lacks the equal-load row:\n%s", md)
	}
}

func TestPacedRate(t *testing.T) {
	at := func(mode string, rep int, rps float64) *Sample {
		s := sample(mode, 64, rps, 5, 9, 0.1, 150)
		s.Rep = rep
		return s
	}
	samples := []*Sample{at("grpc", 0, 9000), at("floor-grpc", 0, 10000), at("grpc", 1, 11000), at("floor-grpc", 1, 10000), at("rest", 0, 8000)}
	for _, c := range []struct {
		rep   int
		proto string
		want  float64
	}{{0, "grpc", 7200}, {1, "grpc", 8000}, {0, "rest", 0}, {2, "grpc", 0}} {
		if got := pacedRate(samples, c.rep, c.proto, 0.8); got != c.want {
			t.Errorf("pacedRate(rep %d, %s) = %v, want %v", c.rep, c.proto, got, c.want)
		}
	}
}

func TestPointOrder(t *testing.T) {
	modes := []string{"direct", "grpc", "rest", "mcp", "floor-grpc", "floor-rest", "python"}
	for k, want := range []string{
		"direct grpc floor-grpc rest floor-rest mcp python",
		"floor-grpc grpc floor-rest rest mcp python direct",
		"rest floor-rest mcp python direct grpc floor-grpc",
	} {
		if got := strings.Join(pointOrder(modes, k), " "); got != want {
			t.Errorf("point %d: %s, want %s", k, got, want)
		}
	}
	// A quota mode runs next to its plain mode, away from the floor.
	qmodes := []string{"direct", "rest", "rest-quota-redis", "floor-rest"}
	for k, want := range []string{
		"direct rest-quota-redis rest floor-rest",
		"floor-rest rest rest-quota-redis direct",
	} {
		if got := strings.Join(pointOrder(qmodes, k), " "); got != want {
			t.Errorf("quota, point %d: %s, want %s", k, got, want)
		}
	}
	if got := strings.Join(pointOrder([]string{"grpc-quota-redis", "direct"}, 0), " "); got != "grpc-quota-redis direct" {
		t.Errorf("quota alone: %s", got)
	}
	// A floor mode without its gateway mode runs on its own.
	if got := strings.Join(pointOrder([]string{"floor-grpc", "direct"}, 1), " "); got != "direct floor-grpc" {
		t.Errorf("floor alone: %s", got)
	}
}

func TestSummarizeQuota(t *testing.T) {
	r := &Report{Config: Config{Concurrencies: []int{64}, Modes: []string{"rest", "rest-quota-redis"}}}
	for rep, cpu := range []float64{0.10, 0.12, 0.08} {
		for _, s := range []*Sample{
			sample("rest", 64, 10000, 5, 12, cpu, 120),
			sample("rest-quota-redis", 64, 9000, 6, 14, cpu*1.2, 150),
		} {
			s.Rep = rep
			r.Samples = append(r.Samples, s)
		}
	}
	r.summarize()
	if len(r.Quota) != 1 {
		t.Fatalf("quota rows: %+v", r.Quota)
	}
	q := r.Quota[0]
	if q.CPURatio == nil || *q.CPURatio != 1.2 || len(q.CPURatios) != 3 || q.MallocsRatio == nil || *q.MallocsRatio != 1.25 {
		t.Errorf("quota row: %+v", q)
	}
	if got := r.Ratios["cpu_rest_quota_redis_vs_rest_c64"]; got != 1.2 {
		t.Errorf("cpu_rest_quota_redis_vs_rest_c64 = %v", got)
	}
	if md := r.markdown(); !strings.Contains(md, "### Quotas in Redis") || !strings.Contains(md, "| rest-quota-redis | 64 |") {
		t.Errorf("markdown without the quota table:\n%s", md)
	}
}

// A run of the streams alone (-streams only) has no unary points: the
// report is still written.
func TestReportStreamsOnly(t *testing.T) {
	r := &Report{Config: Config{Concurrencies: []int{1, 64}, StreamN: 1000, Modes: []string{"direct", "grpc", "rest"}}}
	for _, m := range []string{"direct-stream", "grpc-stream", "rest-stream", "rest-sse"} {
		s := sample(m, 1, 80, 12, 20, 7, 0)
		s.ChunksPerS = 80000
		r.StreamSamples = append(r.StreamSamples, s)
	}
	r.summarize()
	if md := r.markdown(); !strings.Contains(md, "| rest-sse | 80000 |") {
		t.Errorf("markdown without the streams:\n%s", md)
	}
}

// TestSummaryKeepsNoSamples: write puts every sample in latest.json and
// none in summary.json, which keeps the aggregates and ratios; latest.md
// links the summary, not the raw file.
func TestSummaryKeepsNoSamples(t *testing.T) {
	dir := t.TempDir()
	r := &Report{Config: Config{Concurrencies: []int{1}}, Ratios: map[string]any{"cpu_vs_floor_grpc": 1.1}}
	r.Samples = []*Sample{sample("grpc", 1, 800, 1.2, 3.5, 0.6, 240), sample("floor-grpc", 1, 900, 0.9, 3, 0.4, 200)}
	r.DoorSamples = []*Sample{sample("rest", 1, 700, 1.1, 3, 0.5, 300)}
	r.Runs = aggregate(r.Samples)
	if err := r.write(dir); err != nil {
		t.Fatal(err)
	}
	read := func(name string) map[string]any {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m
	}
	full, sum := read("latest.json"), read("summary.json")
	if n := len(full["samples"].([]any)); n != 2 || full["door_samples"] == nil {
		t.Fatalf("latest.json: %d samples, door samples %v; want every sample", n, full["door_samples"])
	}
	for k, v := range sum {
		if strings.HasSuffix(k, "samples") && v != nil {
			t.Errorf("summary.json keeps %s", k)
		}
	}
	if sum["ratios"] == nil || len(sum["runs"].([]any)) != 2 {
		t.Errorf("summary.json without the ratios or the aggregated runs: %v", sum)
	}
	md, err := os.ReadFile(filepath.Join(dir, "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "[summary.json](summary.json)") || strings.Contains(string(md), "](latest.json)") {
		t.Errorf("latest.md links the raw data, or not the summary:\n%.400s", md)
	}
}

// TestBusPerCall: the gateway's publishes and hedges per call are
// aggregated per point and reported; a point without them (the floor) is
// left out.
func TestBusPerCall(t *testing.T) {
	r := &Report{Config: Config{Concurrencies: []int{64}}}
	pub, hedged := 1.0, 0.002
	g := sample("grpc", 64, 4600, 13, 28, 0.15, 170)
	g.Gateway.PublishedPerCall, g.Gateway.HedgedPerCall = &pub, &hedged
	r.Samples = []*Sample{g, sample("floor-grpc", 64, 6000, 10, 20, 0.1, 136)}
	r.Runs = aggregate(r.Samples)
	var b strings.Builder
	r.busMarkdown(&b)
	if md := b.String(); !strings.Contains(md, "| grpc | 64 | 1.0000 | 0.0020 |") || strings.Contains(md, "floor-grpc") {
		t.Fatalf("bus table:\n%s", md)
	}
}
