package main

import (
	"slices"
	"strings"
	"testing"
)

func TestInterleaveOrder(t *testing.T) {
	for _, tc := range []struct {
		c, n, r int
		want    []string
	}{
		{64, 2, 0, []string{"rest", "floor-rest", "floor-rest", "rest"}},
		{64, 2, 1, []string{"floor-rest", "rest", "rest", "floor-rest"}},
		{1, 2, 0, []string{"direct", "rest", "floor-rest", "direct", "floor-rest", "rest"}},
		{1, 3, 1, []string{"direct", "floor-rest", "rest", "direct", "rest", "floor-rest", "direct", "floor-rest", "rest"}},
		{64, 3, 0, []string{"rest", "floor-rest", "floor-rest", "rest", "rest", "floor-rest"}},
		{16, 1, 1, []string{"floor-rest", "rest"}},
	} {
		if got := interleaveOrder("rest", tc.c, tc.n, tc.r); !slices.Equal(got, tc.want) {
			t.Errorf("interleaveOrder(rest, c=%d, n=%d, r=%d) = %q, want %q", tc.c, tc.n, tc.r, got, tc.want)
		}
	}
}

func window(proto, mode string, c, rep int, calls int, p50, p99, cpu1k, mallocs float64) *Sample {
	s := sample(mode, c, float64(calls)/5, p50, p99, cpu1k, mallocs)
	s.Calls, s.Rep, s.Protocol = calls, rep, proto
	return s
}

func TestSummarizeInterleaved(t *testing.T) {
	r := &Report{Config: Config{Concurrencies: []int{1, 64}, Interleave: []int{1, 64}, InterleaveSlices: 2, DurationS: 10}}
	r.InterleavedSamples = []*Sample{
		// rep 0, c=64: the gateway's windows weigh by calls: CPU
		// (0.09*1000 + 0.13*3000) / 4000 = 0.12; the floor's 0.1
		window("grpc", "grpc", 64, 0, 1000, 8, 20, 0.09, 150),
		window("grpc", "floor-grpc", 64, 0, 2000, 8, 20, 0.1, 120),
		window("grpc", "floor-grpc", 64, 0, 2000, 8, 20, 0.1, 120),
		window("grpc", "grpc", 64, 0, 3000, 8, 20, 0.13, 150),
		// rep 1: 1.1
		window("grpc", "floor-grpc", 64, 1, 2000, 8, 20, 0.2, 120),
		window("grpc", "grpc", 64, 1, 2000, 8, 20, 0.22, 150),
		// rep 2: 1.3; a failed window does not count
		window("grpc", "grpc", 64, 2, 2000, 8, 20, 0.13, 150),
		window("grpc", "floor-grpc", 64, 2, 2000, 8, 20, 0.1, 120),
		{Result: window("grpc", "grpc", 64, 2, 2000, 8, 20, 9, 150).Result, Rep: 2, Protocol: "grpc", Failed: "loadgen: exit 1"},
		// rep 0, c=1 REST: direct 0.5 and 0.7 (mean 0.6), gateway 0.9 and
		// 0.95 (added 0.325), floor 0.85 (added 0.25): 1.3
		window("rest", "direct", 1, 0, 5000, 0.5, 1, 0, 0),
		window("rest", "rest", 1, 0, 5000, 0.9, 2, 0.4, 200),
		window("rest", "floor-rest", 1, 0, 5000, 0.85, 2, 0.35, 170),
		window("rest", "floor-rest", 1, 0, 5000, 0.85, 2, 0.35, 170),
		window("rest", "rest", 1, 0, 5000, 0.95, 2, 0.4, 200),
		window("rest", "direct", 1, 0, 5000, 0.7, 1, 0, 0),
		// a gRPC c=1 pair whose floor adds under 0.05 ms: no ratio
		window("grpc", "direct", 1, 0, 5000, 0.6, 1, 0, 0),
		window("grpc", "grpc", 1, 0, 5000, 0.7, 2, 0.4, 200),
		window("grpc", "floor-grpc", 1, 0, 5000, 0.62, 2, 0.35, 170),
	}
	// The matrix's own points, which the interleaved table follows.
	r.Samples = []*Sample{sample("grpc", 64, 4600, 13, 28, 0.15, 170), sample("floor-grpc", 64, 6000, 10, 20, 0.1, 136)}
	r.summarize()

	want := map[string]float64{
		"cpu_vs_floor_grpc_interleaved":          1.2, // median of 1.2, 1.1, 1.3
		"mallocs_vs_floor_grpc_interleaved":      1.25,
		"p50_added_vs_floor_c1_rest_interleaved": 1.3,
	}
	for k, v := range want {
		if got, ok := r.Ratios[k].(float64); !ok || got != v {
			t.Errorf("ratios[%s] = %v, want %v", k, r.Ratios[k], v)
		}
	}
	if v, ok := r.Ratios["p50_added_vs_floor_c1_interleaved"]; ok {
		t.Errorf("p50_added_vs_floor_c1_interleaved = %v, want none (the floor added 0.02 ms)", v)
	}
	var g64 *InterleavedRow
	for i := range r.Interleaved {
		if r.Interleaved[i].Protocol == "grpc" && r.Interleaved[i].Concurrency == 64 {
			g64 = &r.Interleaved[i]
		}
	}
	if g64 == nil {
		t.Fatalf("no gRPC c=64 row in %+v", r.Interleaved)
	}
	if !slices.Equal(g64.CPURatios, []float64{1.2, 1.1, 1.3}) || g64.Toolgate.CPUMSPerCall != 0.13 || g64.Floor.CPUMSPerCall != 0.1 {
		t.Errorf("gRPC c=64 row: per repetition %v, gateway %v, floor %v; want [1.2 1.1 1.3], 0.13 (median of 0.12, 0.22, 0.13), 0.1",
			g64.CPURatios, g64.Toolgate.CPUMSPerCall, g64.Floor.CPUMSPerCall)
	}
	md := r.markdown()
	for _, s := range []string{"### Interleaved, both up", "| grpc | 64 | 0.130 | 0.100 | 1.20 (1.20, 1.10, 1.30) |", "| rest | 1 | 0.400 | 0.350 |", "1.30 (1.30)"} {
		if !strings.Contains(md, s) {
			t.Errorf("latest.md lacks %q", s)
		}
	}
}
