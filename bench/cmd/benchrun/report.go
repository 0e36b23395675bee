package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"github.com/toolgate/toolgate/internal/loadresult"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// The load clients' result format.
type (
	ProcResult = loadresult.ProcResult
	Inflight   = loadresult.Inflight
	GoMem      = loadresult.GoMem
)

// InflightBreakdown is the parked-call memory split by the Go runtime,
// measured on gatewayprof in a second run.
type InflightBreakdown struct {
	Calls                 int       `json:"calls"`
	RSSBytesPerCall       int64     `json:"rss_bytes_per_call"`
	GoroutinesPerCall     float64   `json:"goroutines_per_call"`
	StackBytesPerCall     int64     `json:"stack_bytes_per_call"`
	HeapLiveBytesPerCall  int64     `json:"heap_live_bytes_per_call"`
	HeapAllocBytesPerCall int64     `json:"heap_alloc_bytes_per_call"` // live + not yet collected
	TopLive               []FnAlloc `json:"top_live_heap,omitempty"`
	Files                 []string  `json:"files,omitempty"`
}

// Sample is one load client's result (loadgen or tg_load.py).
type Sample struct {
	loadresult.Result
	Rep    int    `json:"rep"`
	Failed string `json:"failed,omitempty"`
	// Protocol and Window place a sample of the interleaved phase: the
	// pair it belongs to (direct windows too) and its turn.
	Protocol string `json:"protocol,omitempty"`
	Window   int    `json:"window,omitempty"`
	// LostRequests and LostReplies: messages the broker took but did not
	// deliver (non-persistent topics drop when a consumer falls behind);
	// -1 when not known.
	LostRequests int64 `json:"lost_requests"`
	LostReplies  int64 `json:"lost_replies"`
}

func (s *Sample) line() string {
	if s.Failed != "" {
		return "FAILED: " + firstLine(s.Failed)
	}
	l := fmt.Sprintf("rps %8.1f  p50 %7.2f  p99 %7.2f ms  errors %d", s.RPS, s.P50, s.P99, s.Errors)
	if s.Errors > 0 && len(s.ErrorSamples) > 0 {
		l += fmt.Sprintf(" (%.120q)", s.ErrorSamples[0])
	}
	if s.ChunksPerS > 0 {
		l += fmt.Sprintf("  chunks/s %.0f", s.ChunksPerS)
	}
	if s.LostRequests > 0 || s.LostReplies > 0 {
		l += fmt.Sprintf("  dropped %d req %d rep", max(s.LostRequests, 0), max(s.LostReplies, 0))
	}
	if s.Gateway != nil {
		l += fmt.Sprintf("  gateway %.3f CPU-s/1k, RSS %s", s.Gateway.CPUSPer1kCall, mib(s.Gateway.PeakRSSBytes))
	}
	return l
}

// Point is the median over repetitions of one (mode, concurrency).
type Point struct {
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency"`
	RPS         float64 `json:"rps"`
	P50         float64 `json:"p50_ms"`
	P90         float64 `json:"p90_ms"`
	P99         float64 `json:"p99_ms"`
	P999        float64 `json:"p999_ms"`
	// Errors is the total over the repetitions.
	Errors int `json:"errors"`
	// LostMessages: requests and replies the broker dropped, total over the
	// repetitions (where known).
	LostMessages int64     `json:"lost_messages"`
	Repetitions  int       `json:"repetitions"`
	Failed       int       `json:"failed_repetitions,omitempty"`
	RPSSamples   []float64 `json:"rps_samples"`
	P99Samples   []float64 `json:"p99_samples"`
	// GatewayCPUPer1k is the gateway's CPU seconds per 1,000 calls;
	// GatewayPeakRSS its largest RSS during the window (max over reps).
	GatewayCPUPer1k *float64 `json:"gateway_cpu_s_per_1k_calls,omitempty"`
	GatewayPeakRSS  *int64   `json:"gateway_peak_rss_bytes,omitempty"`
	// GatewayMallocsPerCall: the gateway's (or floorgw's) heap allocations
	// per call over the window, from its go_memstats_mallocs_total, median.
	GatewayMallocsPerCall *float64 `json:"gateway_mallocs_per_call,omitempty"`
	// GatewayGCPer10k: its garbage collections per 10,000 calls, median.
	GatewayGCPer10k *float64 `json:"gateway_gc_per_10k_calls,omitempty"`
	// GatewayPublishedPerCall and GatewayHedgedPerCall: the requests the
	// gateway published to the bus per call, and those published again
	// for a silence (hedges), medians; absent for the floor.
	GatewayPublishedPerCall *float64 `json:"gateway_published_per_call,omitempty"`
	GatewayHedgedPerCall    *float64 `json:"gateway_hedged_per_call,omitempty"`
	// CPUPer1k: CPU seconds per 1,000 calls of each process on the path
	// (client = the load generator), medians.
	CPUPer1k   map[string]float64 `json:"cpu_s_per_1k_calls,omitempty"`
	ChunksPerS float64            `json:"chunks_per_s,omitempty"`
}

// Target is one of the goals with what was measured.
// Report is latest.json.
type Report struct {
	Runs                 []Point            `json:"runs"`
	Ratios               map[string]any     `json:"ratios"`
	InflightBytesPerCall int64              `json:"inflight_bytes_per_call"`
	Machine              map[string]any     `json:"machine"`
	Date                 string             `json:"date"`
	Goals                []Goal             `json:"goals"`
	Streaming            []Point            `json:"streaming"`
	Inflight             *Sample            `json:"inflight,omitempty"`
	InflightBreakdown    *InflightBreakdown `json:"inflight_breakdown,omitempty"`
	InflightError        string             `json:"inflight_error,omitempty"`
	// The floor (bench/cmd/floorgw): side by side with the gateway per
	// protocol and concurrency, and its memory per parked call.
	Floor                     []FloorRow        `json:"floor,omitempty"`
	FloorInflightBytesPerCall int64             `json:"floor_inflight_bytes_per_call,omitempty"`
	FloorInflight             *Sample           `json:"floor_inflight,omitempty"`
	FloorInflightError        string            `json:"floor_inflight_error,omitempty"`
	Profiles                  []*ProfileSummary `json:"profiles,omitempty"`
	Config                    Config            `json:"config"`
	ElapsedS                  float64           `json:"elapsed_s"`
	LoadEnd                   string            `json:"load_average_end"`
	Samples                   []*Sample         `json:"samples"`

	analysis      bool      // ANALYSIS.md exists next to latest.md: link it
	StreamSamples []*Sample `json:"stream_samples"`
	// PacedSamples are the equal-load points (Config.PacedFraction); Paced
	// summarizes them per protocol.
	PacedSamples []*Sample  `json:"paced_samples,omitempty"`
	Paced        []PacedRow `json:"paced,omitempty"`
	// InterleavedSamples are the interleaved phase's windows
	// (interleave.go); Interleaved summarizes them.
	InterleavedSamples []*Sample `json:"interleaved_samples,omitempty"`
	// TurnSamples are the turns at c=1 (turns.go); Turns their summary.
	TurnSamples []*Sample  `json:"turn_samples,omitempty"`
	Turns       []TurnsRow `json:"turns,omitempty"`
	// DoorSamples are the doors phase's windows (doors.go); Doors its
	// summary.
	DoorSamples []*Sample `json:"door_samples,omitempty"`
	Doors       []DoorRow `json:"doors,omitempty"`
	// OpsSamples and OpsBus are the operations phase's windows and what
	// they wrote to the broker (ops.go); Ops its summary.
	OpsSamples  []*Sample        `json:"operation_samples,omitempty"`
	OpsBus      []OpsBus         `json:"operation_bus,omitempty"`
	Ops         *OpsRow          `json:"operations,omitempty"`
	Interleaved []InterleavedRow `json:"interleaved,omitempty"`
	// Quota: the quota modes beside their plain modes (quota.go).
	Quota []QuotaRow `json:"quota,omitempty"`
}

// PacedRow is the gateway beside the floor at the same paced load: medians
// over repetitions, and CPURatio the median of the per-repetition ratios.
type PacedRow struct {
	Protocol    string    `json:"protocol"`
	Concurrency int       `json:"concurrency"`
	Rate        float64   `json:"rate"`
	Toolgate    FloorSide `json:"toolgate"`
	Floor       FloorSide `json:"floor"`
	CPURatio    *float64  `json:"cpu_vs_floor,omitempty"`
	Ratios      []float64 `json:"cpu_vs_floor_per_repetition,omitempty"`
}

var modeOrder = map[string]int{"direct": 0, "grpc": 1, "rest": 2, "mcp": 2, "connect": 2, "floor-grpc": 3, "floor-rest": 4, "python": 5,
	"grpc-quota-redis": 1, "rest-quota-redis": 2,
	"direct-stream": 6, "grpc-stream": 7, "rest-stream": 8, "rest-sse": 9, "floor-grpc-stream": 10}

// FloorRow is the gateway and the floor on one protocol at one
// concurrency: what each costs per call and adds over direct.
type FloorRow struct {
	Protocol    string    `json:"protocol"`
	Concurrency int       `json:"concurrency"`
	Toolgate    FloorSide `json:"toolgate"`
	Floor       FloorSide `json:"floor"`
	// Toolgate ÷ floor (absent when the floor's figure is too small to
	// divide by: an added latency under 0.05 ms).
	CPURatio       *float64 `json:"cpu_vs_floor,omitempty"`
	MallocsRatio   *float64 `json:"mallocs_vs_floor,omitempty"`
	P50AddedRatio  *float64 `json:"p50_added_vs_floor,omitempty"`
	P99AddedRatio  *float64 `json:"p99_added_vs_floor,omitempty"`
	P50OverFloorMS float64  `json:"p50_over_floor_ms"`
}

// FloorSide is one server's figures at a point.
type FloorSide struct {
	RPS            float64 `json:"rps"`
	CPUMSPerCall   float64 `json:"cpu_ms_per_call"`
	MallocsPerCall float64 `json:"mallocs_per_call"`
	// GCPer10kCalls: garbage collections per 10,000 calls (absent when the
	// server did not report them).
	GCPer10kCalls *float64 `json:"gc_per_10k_calls,omitempty"`
	P50MS         float64  `json:"p50_ms"`
	P99MS         float64  `json:"p99_ms"`
	// Over direct at the same concurrency (absent without a direct point).
	P50AddedMS *float64 `json:"p50_added_ms,omitempty"`
	P99AddedMS *float64 `json:"p99_added_ms,omitempty"`
}

func aggregate(samples []*Sample) []Point {
	type key struct {
		mode string
		conc int
	}
	groups := map[key][]*Sample{}
	var keys []key
	for _, s := range samples {
		k := key{s.Mode, s.Concurrency}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], s)
	}
	sort.Slice(keys, func(i, j int) bool {
		if oi, oj := modeOrder[keys[i].mode], modeOrder[keys[j].mode]; oi != oj {
			return oi < oj
		}
		if keys[i].mode != keys[j].mode { // modes of one rank by name, each mode's rows together
			return keys[i].mode < keys[j].mode
		}
		return keys[i].conc < keys[j].conc
	})
	var out []Point
	for _, k := range keys {
		p := Point{Mode: k.mode, Concurrency: k.conc, CPUPer1k: map[string]float64{}}
		var ok []*Sample
		for _, s := range groups[k] {
			p.Repetitions++
			if s.Failed != "" {
				p.Failed++
				continue
			}
			ok = append(ok, s)
			p.Errors += s.Errors
			p.LostMessages += max(s.LostRequests, 0) + max(s.LostReplies, 0)
		}
		col := func(f func(*Sample) float64) []float64 {
			var v []float64
			for _, s := range ok {
				v = append(v, f(s))
			}
			return v
		}
		p.RPSSamples = col(func(s *Sample) float64 { return s.RPS })
		p.P99Samples = col(func(s *Sample) float64 { return s.P99 })
		p.RPS = median(p.RPSSamples)
		p.P50 = median(col(func(s *Sample) float64 { return s.P50 }))
		p.P90 = median(col(func(s *Sample) float64 { return s.P90 }))
		p.P99 = median(p.P99Samples)
		p.P999 = median(col(func(s *Sample) float64 { return s.P999 }))
		p.ChunksPerS = median(col(func(s *Sample) float64 { return s.ChunksPerS }))
		var gwCPU, gwMallocs, gwGC, gwPub, gwHedged []float64
		var peak int64
		for _, s := range ok {
			if s.Gateway != nil {
				if v := s.Gateway.PublishedPerCall; v != nil {
					gwPub = append(gwPub, *v)
				}
				if v := s.Gateway.HedgedPerCall; v != nil {
					gwHedged = append(gwHedged, *v)
				}
				gwCPU = append(gwCPU, s.Gateway.CPUSPer1kCall)
				peak = max(peak, s.Gateway.PeakRSSBytes)
				if s.Gateway.MallocsPerCall > 0 {
					gwMallocs = append(gwMallocs, s.Gateway.MallocsPerCall)
				}
				if s.Gateway.GCCycles > 0 {
					gwGC = append(gwGC, s.Gateway.GCPer10kCalls)
				}
			}
		}
		if len(gwCPU) > 0 {
			v := round(median(gwCPU), 4)
			p.GatewayCPUPer1k, p.GatewayPeakRSS = &v, &peak
		}
		if len(gwMallocs) > 0 {
			v := round(median(gwMallocs), 1)
			p.GatewayMallocsPerCall = &v
		}
		if len(gwGC) > 0 {
			v := round(median(gwGC), 2)
			p.GatewayGCPer10k = &v
		}
		if len(gwPub) > 0 {
			v := round(median(gwPub), 4)
			p.GatewayPublishedPerCall = &v
		}
		if len(gwHedged) > 0 {
			v := round(median(gwHedged), 4)
			p.GatewayHedgedPerCall = &v
		}
		if len(ok) > 0 {
			p.CPUPer1k["client"] = round(median(col(func(s *Sample) float64 {
				if s.Calls == 0 {
					return 0
				}
				return s.ClientCPUS * 1000 / float64(s.Calls)
			})), 4)
			for _, name := range []string{"gateway", "echo", "broker"} {
				var v []float64
				for _, s := range ok {
					if pr := s.Procs[name]; pr != nil {
						v = append(v, pr.CPUSPer1kCall)
					}
				}
				if len(v) > 0 {
					p.CPUPer1k[name] = round(median(v), 4)
				}
			}
		}
		out = append(out, p)
	}
	return out
}

func find(ps []Point, mode string, conc int) *Point {
	for i := range ps {
		if ps[i].Mode == mode && ps[i].Concurrency == conc && len(ps[i].RPSSamples) > 0 {
			return &ps[i]
		}
	}
	return nil
}

func (r *Report) summarize() {
	r.Runs = aggregate(r.Samples)
	r.Streaming = aggregate(r.StreamSamples)
	r.Ratios = map[string]any{}
	ratio := func(name string, a, b *Point, f func(*Point) float64) (float64, bool) {
		if a == nil || b == nil || f(b) == 0 {
			return 0, false
		}
		v := round(f(a)/f(b), 3)
		r.Ratios[name] = v
		return v, true
	}
	diff := func(name string, a, b *Point, f func(*Point) float64) (float64, bool) {
		if a == nil || b == nil {
			return 0, false
		}
		v := round(f(a)-f(b), 3)
		r.Ratios[name] = v
		return v, true
	}
	rps := func(p *Point) float64 { return p.RPS }
	p99 := func(p *Point) float64 { return p.P99 }
	p50 := func(p *Point) float64 { return p.P50 }
	chunks := func(p *Point) float64 { return p.ChunksPerS }

	// Ratios at every concurrency, then the targets.
	byConc := map[string]map[string]float64{}
	for _, c := range r.Config.Concurrencies {
		d := find(r.Runs, "direct", c)
		py := find(r.Runs, "python", c)
		for _, m := range []string{"grpc", "rest", "mcp", "connect"} {
			p := find(r.Runs, m, c)
			if p == nil {
				continue
			}
			add := func(name string, v float64) {
				if byConc[name] == nil {
					byConc[name] = map[string]float64{}
				}
				byConc[name][fmt.Sprint(c)] = v
			}
			if d != nil && d.RPS > 0 {
				add(m+"_over_direct_rps", round(p.RPS/d.RPS, 3))
				add(m+"_added_p50_ms", round(p.P50-d.P50, 3))
				add(m+"_added_p99_ms", round(p.P99-d.P99, 3))
			}
			if py != nil && py.RPS > 0 {
				add(m+"_over_python_rps", round(p.RPS/py.RPS, 3))
			}
		}
	}
	r.Ratios["by_concurrency"] = byConc

	d64, g64, r64, py64 := find(r.Runs, "direct", 64), find(r.Runs, "grpc", 64), find(r.Runs, "rest", 64), find(r.Runs, "python", 64)
	d16, g16, r16 := find(r.Runs, "direct", 16), find(r.Runs, "grpc", 16), find(r.Runs, "rest", 16)
	// Ratios to direct and to the Python service are kept for reference;
	// the goals in force (goals.go) are measured against the floor.
	_, _ = ratio("grpc_over_direct_rps_c64", g64, d64, rps)
	_, _ = ratio("rest_over_direct_rps_c64", r64, d64, rps)
	_, _ = diff("grpc_added_p99_ms_c16", g16, d16, p99)
	_, _ = diff("rest_added_p99_ms_c16", r16, d16, p99)
	_, _ = diff("grpc_added_p50_ms_c16", g16, d16, p50)
	_, _ = diff("rest_added_p50_ms_c16", r16, d16, p50)
	_, _ = ratio("grpc_over_python_rps_c64", g64, py64, rps)
	_, _ = ratio("rest_over_python_rps_c64", r64, py64, rps)
	_, _ = ratio("direct_over_python_rps_c64", d64, py64, rps)
	sc := max(r.Config.StreamConc, 1)
	ds, gs, rs := find(r.Streaming, "direct-stream", sc), find(r.Streaming, "grpc-stream", sc), find(r.Streaming, "rest-stream", sc)
	_, _ = ratio("grpc_stream_over_direct_stream_chunks", gs, ds, chunks)
	_, _ = ratio("rest_stream_over_direct_stream_chunks", rs, ds, chunks)
	_, _ = ratio("rest_sse_over_direct_stream_chunks", find(r.Streaming, "rest-sse", sc), ds, chunks)
	if r.Inflight != nil && r.Inflight.Inflight != nil {
		r.InflightBytesPerCall = r.Inflight.Inflight.BytesPerCall
	}
	r.summarizeFloor()
	r.summarizePaced()
	r.summarizeInterleaved()
	r.summarizeTurns()
	r.summarizeDoors()
	r.summarizeQuota()
	r.summarizeOps()
	r.summarizeGoals()
}

// summarizePaced sets the equal-load rows and cpu_vs_floor_*_equal_load.
func (r *Report) summarizePaced() {
	r.Paced = nil
	points := aggregate(r.PacedSamples)
	for _, proto := range []string{"grpc", "rest"} {
		tg, fl := find(points, proto, pacedConc), find(points, "floor-"+proto, pacedConc)
		ratio, perRep, ok := pairedCPURatio(r.PacedSamples, proto, pacedConc)
		if tg == nil || fl == nil || !ok {
			continue
		}
		var rates []float64
		for _, s := range r.PacedSamples {
			if s.Mode == proto && s.Failed == "" {
				rates = append(rates, s.Rate)
			}
		}
		r.Paced = append(r.Paced, PacedRow{Protocol: proto, Concurrency: pacedConc, Rate: round(median(rates), 0),
			Toolgate: floorSide(tg, nil), Floor: floorSide(fl, nil), CPURatio: &ratio, Ratios: perRep})
		r.Ratios["cpu_vs_floor_"+proto+"_equal_load"] = ratio
	}
}

// pairedCPURatio is the median over repetitions of the gateway's CPU per
// call divided by the floor's in the same repetition, and those ratios in
// the order of the repetitions. The two run back to back within a
// repetition, so drift of the machine between repetitions (seen up to
// 35 % here) cancels, which the ratio of the two medians does not do.
func pairedCPURatio(samples []*Sample, proto string, c int) (float64, []float64, bool) {
	cpu := func(mode string) map[int]float64 {
		out := map[int]float64{}
		for _, s := range samples {
			if s.Mode == mode && s.Concurrency == c && s.Failed == "" && s.Gateway != nil && s.Gateway.CPUSPer1kCall > 0 {
				out[s.Rep] = s.Gateway.CPUSPer1kCall
			}
		}
		return out
	}
	tg, fl := cpu(proto), cpu("floor-"+proto)
	reps := make([]int, 0, len(tg))
	for rep := range tg {
		if _, ok := fl[rep]; ok {
			reps = append(reps, rep)
		}
	}
	if len(reps) == 0 {
		return 0, nil, false
	}
	sort.Ints(reps)
	ratios := make([]float64, len(reps))
	for i, rep := range reps {
		ratios[i] = round(tg[rep]/fl[rep], 3)
	}
	return round(median(ratios), 3), ratios, true
}

// floorSide is one server's figures at point p, with the latency it adds
// over direct point d when there is one.
func floorSide(p, d *Point) FloorSide {
	fs := FloorSide{RPS: p.RPS, P50MS: p.P50, P99MS: p.P99, GCPer10kCalls: p.GatewayGCPer10k}
	if p.GatewayCPUPer1k != nil {
		fs.CPUMSPerCall = *p.GatewayCPUPer1k
	}
	if p.GatewayMallocsPerCall != nil {
		fs.MallocsPerCall = *p.GatewayMallocsPerCall
	}
	if d != nil {
		a50, a99 := round(p.P50-d.P50, 3), round(p.P99-d.P99, 3)
		fs.P50AddedMS, fs.P99AddedMS = &a50, &a99
	}
	return fs
}

// summarizeFloor sets the floor rows and the gateway-versus-floor ratios.
func (r *Report) summarizeFloor() {
	r.Floor, r.FloorInflightBytesPerCall = nil, 0
	byConc, _ := r.Ratios["by_concurrency"].(map[string]map[string]float64)
	put := func(name string, c int, v float64) {
		if byConc[name] == nil {
			byConc[name] = map[string]float64{}
		}
		byConc[name][fmt.Sprint(c)] = v
	}
	ratioOf := func(a, b, minB float64) *float64 {
		if b < minB || a <= 0 {
			return nil
		}
		v := round(a/b, 3)
		return &v
	}
	for _, proto := range []string{"grpc", "rest"} {
		for _, c := range r.Config.Concurrencies {
			tg, fl, d := find(r.Runs, proto, c), find(r.Runs, "floor-"+proto, c), find(r.Runs, "direct", c)
			if tg == nil || fl == nil {
				continue
			}
			row := FloorRow{Protocol: proto, Concurrency: c, Toolgate: floorSide(tg, d), Floor: floorSide(fl, d), P50OverFloorMS: round(tg.P50-fl.P50, 3)}
			row.CPURatio = ratioOf(row.Toolgate.CPUMSPerCall, row.Floor.CPUMSPerCall, 1e-9)
			row.MallocsRatio = ratioOf(row.Toolgate.MallocsPerCall, row.Floor.MallocsPerCall, 1e-9)
			if d != nil {
				row.P50AddedRatio = ratioOf(*row.Toolgate.P50AddedMS, *row.Floor.P50AddedMS, 0.05)
				row.P99AddedRatio = ratioOf(*row.Toolgate.P99AddedMS, *row.Floor.P99AddedMS, 0.05)
			}
			r.Floor = append(r.Floor, row)
			if row.CPURatio != nil {
				put(proto+"_cpu_vs_floor", c, *row.CPURatio)
			}
			if row.MallocsRatio != nil {
				put(proto+"_mallocs_vs_floor", c, *row.MallocsRatio)
			}
			if row.P50AddedRatio != nil {
				put(proto+"_p50_added_vs_floor", c, *row.P50AddedRatio)
			}
			put(proto+"_p50_over_floor_ms", c, row.P50OverFloorMS)
			if d != nil && d.RPS > 0 {
				put("floor_"+proto+"_over_direct_rps", c, round(fl.RPS/d.RPS, 3))
				put("floor_"+proto+"_added_p50_ms", c, *row.Floor.P50AddedMS)
				put("floor_"+proto+"_added_p99_ms", c, *row.Floor.P99AddedMS)
			}
			// The headline ratios: CPU and allocations at c=64, where the
			// per-call figures are steadiest; latency at c=1, where nothing
			// queues.
			suffix := map[string]string{"grpc": "", "rest": "_rest"}[proto]
			if c == 64 {
				if row.CPURatio != nil {
					r.Ratios["cpu_vs_floor_"+proto] = *row.CPURatio
				}
				if v, _, ok := pairedCPURatio(r.Samples, proto, c); ok {
					r.Ratios["cpu_vs_floor_"+proto+"_paired"] = v
				}
				if row.MallocsRatio != nil {
					r.Ratios["mallocs_vs_floor_"+proto] = *row.MallocsRatio
				}
				r.Ratios[proto+"_over_floor_rps_c64"] = round(tg.RPS/max(fl.RPS, 1e-9), 3)
			}
			if c == 1 {
				if row.P50AddedRatio != nil {
					r.Ratios["p50_added_vs_floor_c1"+suffix] = *row.P50AddedRatio
				}
				r.Ratios[proto+"_p50_over_floor_ms_c1"] = row.P50OverFloorMS
			}
		}
	}
	if r.FloorInflight != nil && r.FloorInflight.Inflight != nil {
		r.FloorInflightBytesPerCall = r.FloorInflight.Inflight.BytesPerCall
		if r.InflightBytesPerCall > 0 && r.FloorInflightBytesPerCall > 0 {
			r.Ratios["mem_per_parked_call_vs_floor"] = round(float64(r.InflightBytesPerCall)/float64(r.FloorInflightBytesPerCall), 3)
		}
		// Stacks and live heap after a forced GC: RSS moves with where
		// the collections fell, these do not.
		if fl, bd := floorGoMem(r.FloorInflight), r.InflightBreakdown; fl != nil && bd != nil {
			if gw, floor := bd.StackBytesPerCall+bd.HeapLiveBytesPerCall, fl.StackBytesPerCall+fl.HeapLiveBytesPerCall; gw > 0 && floor > 0 {
				r.Ratios["mem_live_per_parked_call_vs_floor"] = round(float64(gw)/float64(floor), 3)
			}
		}
	}
}

// floorGoMem is the floor's parked memory split by its Go runtime (its
// stacks and live heap per call), nil when it was not read.
func floorGoMem(s *Sample) *InflightBreakdown {
	if s == nil || s.Inflight == nil || s.Inflight.Idle == nil || s.Inflight.Parked == nil || s.Inflight.Calls == 0 {
		return nil
	}
	in, n := s.Inflight, int64(s.Inflight.Calls)
	return &InflightBreakdown{
		Calls:                 in.Calls,
		RSSBytesPerCall:       in.BytesPerCall,
		GoroutinesPerCall:     round(float64(in.Parked.Goroutines-in.Idle.Goroutines)/float64(n), 2),
		StackBytesPerCall:     (in.Parked.StackBytes - in.Idle.StackBytes) / n,
		HeapLiveBytesPerCall:  (in.Parked.HeapLive - in.Idle.HeapLive) / n,
		HeapAllocBytesPerCall: (in.Parked.HeapAlloc - in.Idle.HeapAlloc) / n,
	}
}

func (r *Report) write(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := r.writeSummary(dir); err != nil {
		return err
	}
	_, err = os.Stat(filepath.Join(dir, "ANALYSIS.md"))
	r.analysis = err == nil
	return os.WriteFile(filepath.Join(dir, "latest.md"), []byte(r.markdown()), 0o644)
}

// writeSummary writes summary.json: latest.json without its raw samples
// — the aggregates, ratios, goals and the run's setting. It is what the
// repository keeps of a run (bench/run.sh publishes it with latest.md
// and the plot); latest.json and the profiles stay in the run's output
// directory.
func (r *Report) writeSummary(dir string) error {
	s := *r
	s.Samples, s.StreamSamples, s.PacedSamples, s.InterleavedSamples = nil, nil, nil, nil
	s.TurnSamples, s.DoorSamples, s.OpsSamples = nil, nil, nil
	b, err := json.MarshalIndent(&s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644)
}

func (r *Report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	kind := "full run"
	if r.Config.Quick {
		kind = "quick run (development; one repetition, short windows)"
	}
	w("# toolgate benchmark\n\n")
	w("%s, %s, took %.0f s. Generated by `bench/run.sh` (`make bench`); the plot is [latest.png](latest.png), the aggregates and ratios [summary.json](summary.json); the raw samples (`latest.json`) and the profiles are the run's artefacts, in its output directory (`.cache/bench/full/` for `make bench`), not in the repository.\n\n", r.Date, kind, r.ElapsedS)
	w("Machine: %v, %v cores, %v; Go %v, Pulsar %v. Load average at start %v, at end %v.", r.Machine["cpu"], r.Machine["cores"], r.Machine["memory"], r.Machine["go"], r.Machine["pulsar"], r.Machine["load_average_start"], r.LoadEnd)
	if n, _ := r.Machine["note"].(string); n != "" {
		w(" %s", n)
	}
	w("\n\nEverything runs on this one machine: the broker, the echo service, the gateway and the load generator share its cores, so a figure is what the whole path achieves here, not the gateway alone.\n\n")
	w("Method: closed loop, each of *c* workers calling again as soon as its reply arrives; %.1f s warm-up, then a %.0f s window; modes interleaved (order rotated per point); %d repetition(s), median shown. The echoed message is %d bytes; gRPC uses %d connections, REST one keep-alive connection per worker. The gateway is restarted for each of its points, so its CPU time and peak RSS belong to that point.\n\n",
		r.Config.WarmupS, r.Config.DurationS, r.Config.Repetitions, r.Config.MsgSize, r.Config.GRPCConns)

	if r.analysis {
		w("What stands between the code and the goals, from these numbers and the profiles below: [ANALYSIS.md](ANALYSIS.md).\n\n")
	}
	r.goalsMarkdown(w)

	w("## Unary calls\n\n")
	w("| mode | c | calls/s | p50 ms | p90 ms | p99 ms | p99.9 ms | errors | msgs dropped by broker | gateway CPU s / 1k calls | gateway allocs / call | gateway peak RSS |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Runs {
		gcpu, gmal, grss := "–", "–", "–"
		if p.GatewayCPUPer1k != nil {
			gcpu = fmt.Sprintf("%.3f", *p.GatewayCPUPer1k)
			grss = mib(*p.GatewayPeakRSS)
		}
		if p.GatewayMallocsPerCall != nil {
			gmal = fmt.Sprintf("%.0f", *p.GatewayMallocsPerCall)
		}
		errs := fmt.Sprint(p.Errors)
		if p.Failed > 0 {
			errs += fmt.Sprintf(" (%d run(s) failed)", p.Failed)
		}
		w("| %s | %d | %.0f | %.2f | %.2f | %.2f | %.2f | %s | %d | %s | %s | %s |\n", p.Mode, p.Concurrency, p.RPS, p.P50, p.P90, p.P99, p.P999, errs, p.LostMessages, gcpu, gmal, grss)
	}
	w("\nIn the *floor-* rows the \"gateway\" is `bench/cmd/floorgw`. *gateway allocs / call*: heap allocations over the window from the server's `go_memstats_mallocs_total` (its `/metrics`), less what one scrape of it allocates, per call completed.\n")
	w("\n*errors* are failed calls in the measured windows (total over repetitions); *msgs dropped by broker* counts requests (all modes) and replies (gateway modes) that Pulsar accepted but did not deliver over the whole point, warm-up included: non-persistent topics drop when a consumer falls behind, and each such call then waits for its deadline (5 s).\n\n")

	w("### Where a call's CPU goes (CPU ms per call, medians)\n\n")
	w("Every process on the path, from /proc utime+stime over the window divided by the calls completed in it. On a saturated machine the sum bounds throughput: %d cores / total.\n\n", r.cores())
	w("| mode | c | load client | gateway | echo service | broker | total |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Runs {
		if p.Concurrency != 64 && p.Concurrency != 16 {
			continue
		}
		cell := func(name string) string {
			v, ok := p.CPUPer1k[name]
			if !ok {
				return "–"
			}
			return fmt.Sprintf("%.3f", v)
		}
		var tot float64
		for _, v := range p.CPUPer1k {
			tot += v
		}
		w("| %s | %d | %s | %s | %s | %s | %.3f |\n", p.Mode, p.Concurrency, cell("client"), cell("gateway"), cell("echo"), cell("broker"), tot)
	}
	w("\n")

	r.busMarkdown(&b)
	r.floorMarkdown(&b)
	r.doorsMarkdown(&b)
	r.quotaMarkdown(&b)
	r.opsMarkdown(&b)

	if len(r.Streaming) > 0 {
		at := "One call at a time"
		if r.Config.StreamConc > 1 {
			at = fmt.Sprintf("%d calls at once", r.Config.StreamConc)
		}
		w("## Streaming\n\n%s, each a %d-chunk reply (`{\"mode\":\"stream\"}`); `rest-stream` reads NDJSON, `rest-sse` Server-Sent Events; chunks per second of one stream (chunks ÷ median call time).\n\n", at, r.Config.StreamN)
		w("| mode | chunks/s | call p50 ms | call p99 ms | errors | gateway CPU s / 1k chunks |\n|---|---:|---:|---:|---:|---:|\n")
		for _, p := range r.Streaming {
			g := "–"
			if p.GatewayCPUPer1k != nil {
				g = fmt.Sprintf("%.3f", *p.GatewayCPUPer1k/float64(r.Config.StreamN))
			}
			w("| %s | %.0f | %.1f | %.1f | %d | %s |\n", p.Mode, p.ChunksPerS, p.P50, p.P99, p.Errors, g)
		}
		w("\n")
	}

	w("## Memory per in-flight call\n\n")
	if r.Inflight != nil && r.Inflight.Inflight != nil {
		in := r.Inflight.Inflight
		w("%d gRPC calls over %d connections, parked at once on the echo service's sleep mode (%d ms), on a fresh gateway. RSS before: %s; with all calls parked: %s; (parked − idle) / calls = **%d bytes per call**. The broker counted %d of the requests before RSS was sampled %.1f s after the first call; %d calls had ended by then; %d failed in all (messages the broker dropped: %d requests, %d replies; those calls end at their deadline, which does not change what was parked).\n\n",
			in.Calls, in.Conns, in.SleepMS, mib(in.IdleRSSBytes), mib(in.ParkedRSSBytes), in.BytesPerCall, in.ReachedBroker, in.SampledAfterS, in.DoneAtSample, r.Inflight.Errors,
			r.Inflight.LostRequests, r.Inflight.LostReplies)
	} else {
		w("Not measured: %s\n\n", r.InflightError)
	}
	if r.FloorInflight != nil && r.FloorInflight.Inflight != nil {
		in := r.FloorInflight.Inflight
		w("The same test on the floor (`bench/cmd/floorgw`, a fresh process): RSS %s → %s, **%d bytes per call** (errors %d); the gateway holds %.2f× the floor's memory per parked call.\n\n",
			mib(in.IdleRSSBytes), mib(in.ParkedRSSBytes), in.BytesPerCall, r.FloorInflight.Errors, r.Ratios["mem_per_parked_call_vs_floor"])
	} else if r.FloorInflightError != "" {
		w("On the floor: not measured: %s\n\n", r.FloorInflightError)
	}
	if bd := r.InflightBreakdown; bd != nil {
		w("Where it goes, from the Go runtime of `bench/cmd/gatewayprof` in a second run of the same test (%d calls; RSS growth there %d bytes per call):\n\n", bd.Calls, bd.RSSBytesPerCall)
		fl := floorGoMem(r.FloorInflight)
		if fl == nil {
			w("| per parked call | bytes |\n|---|---:|\n")
			w("| goroutine stacks (%.2f goroutines per call) | %d |\n", bd.GoroutinesPerCall, bd.StackBytesPerCall)
			w("| live heap (after a forced GC) | %d |\n", bd.HeapLiveBytesPerCall)
			w("| heap incl. garbage not yet collected (GOGC headroom) | %d |\n\n", bd.HeapAllocBytesPerCall)
		} else {
			w("| per parked call | gateway bytes | floor bytes |\n|---|---:|---:|\n")
			w("| goroutine stacks (goroutines per call: gateway %.2f, floor %.2f) | %d | %d |\n", bd.GoroutinesPerCall, fl.GoroutinesPerCall, bd.StackBytesPerCall, fl.StackBytesPerCall)
			w("| live heap (after a forced GC) | %d | %d |\n", bd.HeapLiveBytesPerCall, fl.HeapLiveBytesPerCall)
			w("| stacks + live heap | %d | %d |\n", bd.StackBytesPerCall+bd.HeapLiveBytesPerCall, fl.StackBytesPerCall+fl.HeapLiveBytesPerCall)
			w("| heap incl. garbage not yet collected (GOGC headroom) | %d | %d |\n\n", bd.HeapAllocBytesPerCall, fl.HeapAllocBytesPerCall)
			if v, ok := r.Ratios["mem_live_per_parked_call_vs_floor"]; ok {
				w("Stacks and live heap, which do not move with GC timing as RSS does: the gateway holds **%v×** the floor's per parked call (`mem_live_per_parked_call_vs_floor`).\n\n", v)
			}
		}
		if len(bd.TopLive) > 0 {
			w("<details><summary>Live heap with the calls parked, by allocation site</summary>\n\n| function | live | %% | cum |\n|---|---:|---:|---:|\n")
			for _, f := range bd.TopLive {
				w("| `%s` | %s | %.1f%% | %s |\n", f.Func, f.Flat, f.FlatPct, f.Cum)
			}
			w("\n</details>\n\n")
		}
	}

	for _, p := range r.Profiles {
		p.markdown(&b)
	}

	w("## Reproduce\n\n```sh\nmake bench        # this report (docs/benchmarks/latest.*), about %d minutes\nmake bench-quick  # about 2 minutes, written to .cache/bench/quick/\n```\n\nGo microbenchmarks of the hot-path pieces: `go test -run '^$' -bench . -benchmem ./wire ./internal/bridge ./internal/toolcall`.\n", int(math.Ceil(r.ElapsedS/60)))
	return b.String()
}

func (r *Report) cores() int {
	if n, ok := r.Machine["cores"].(int); ok {
		return n
	}
	return runtime.NumCPU()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return round((s[n/2-1]+s[n/2])/2, 3)
}

func round(f float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(f*p) / p
}

func trimFloat(f float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", f), "0"), ".")
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func machineInfo(adminURL, note string) map[string]any {
	m := map[string]any{
		"cores": runtime.NumCPU(), "go": runtime.Version(), "os": runtime.GOOS + "/" + runtime.GOARCH,
		"load_average_start": loadAvg(), "note": note,
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb); err == nil {
					m["memory"] = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m["kernel"] = strings.TrimSpace(string(b))
	}
	hc := http.Client{Timeout: 3 * time.Second}
	if resp, err := hc.Get(adminURL + "/admin/v2/brokers/version"); err == nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			m["pulsar"] = strings.Trim(strings.TrimSpace(string(b)), `"`)
		}
	}
	if _, ok := m["pulsar"]; !ok {
		m["pulsar"] = "?"
	}
	return m
}

// floorMarkdown is the gateway beside the floor.
func (r *Report) floorMarkdown(b *strings.Builder) {
	if len(r.Floor) == 0 {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Against the floor\n\n")
	w("`bench/cmd/floorgw` is the smallest forwarder over the same path: gRPC or HTTP/JSON in, one Pulsar producer (the same adaptive batching) and one consumer, a map of waiting calls; no authentication, registry, argument validation, metrics, tracing or call log. It runs in the same session, fed by the same load generator against the same echo service; the gateway runs as in production, %s on every call, metrics and argument validation on. The gateway's cost is read against this floor, not against direct (see ANALYSIS.md).\n\n", authText(r.Config.GatewayAuth))
	h := func(k string) string {
		v, ok := r.Ratios[k].(float64)
		if !ok {
			return "–"
		}
		return trimFloat(v) + "×"
	}
	if len(r.Interleaved) > 0 {
		w("Headline, gateway ÷ floor with both up and taking turns (\"Interleaved\" below): CPU per call at c=64: gRPC %s, REST %s; p50 added over direct at c=1, call by call (\"Latency at c=1\" below): gRPC %s, REST %s (in windows: %s, %s); allocations per call at c=64: gRPC %s, REST %s. Memory per parked call: %s.\n\n",
			h("cpu_vs_floor_grpc_interleaved"), h("cpu_vs_floor_rest_interleaved"), h("p50_added_vs_floor_c1_turns"), h("p50_added_vs_floor_c1_rest_turns"),
			h("p50_added_vs_floor_c1_interleaved"), h("p50_added_vs_floor_c1_rest_interleaved"),
			h("mallocs_vs_floor_grpc_interleaved"), h("mallocs_vs_floor_rest_interleaved"), h("mem_per_parked_call_vs_floor"))
		w("One point after the other (the table): ")
	} else {
		w("Headline: gateway ÷ floor, ")
	}
	w("CPU per call at c=64: gRPC %s, REST %s (paired within each repetition, median: %s, %s; at equal load: %s, %s); allocations per call at c=64: gRPC %s, REST %s; p50 added over direct at c=1: gRPC %s, REST %s; memory per parked call: %s.\n\n",
		h("cpu_vs_floor_grpc"), h("cpu_vs_floor_rest"), h("cpu_vs_floor_grpc_paired"), h("cpu_vs_floor_rest_paired"), h("cpu_vs_floor_grpc_equal_load"), h("cpu_vs_floor_rest_equal_load"), h("mallocs_vs_floor_grpc"), h("mallocs_vs_floor_rest"),
		h("p50_added_vs_floor_c1"), h("p50_added_vs_floor_c1_rest"), h("mem_per_parked_call_vs_floor"))
	w("| protocol | c | CPU ms / call: gateway | floor | × | allocs / call: gateway | floor | × | GCs / 10k calls: gateway | floor | p50 added over direct, ms: gateway | floor | p99 added, ms: gateway | floor | calls/s: gateway | floor |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	x := cell2
	for _, f := range r.Floor {
		w("| %s | %d | %.3f | %.3f | %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f |\n", f.Protocol, f.Concurrency,
			f.Toolgate.CPUMSPerCall, f.Floor.CPUMSPerCall, x(f.CPURatio), f.Toolgate.MallocsPerCall, f.Floor.MallocsPerCall, x(f.MallocsRatio),
			x(f.Toolgate.GCPer10kCalls), x(f.Floor.GCPer10kCalls), x(f.Toolgate.P50AddedMS), x(f.Floor.P50AddedMS), x(f.Toolgate.P99AddedMS), x(f.Floor.P99AddedMS), f.Toolgate.RPS, f.Floor.RPS)
	}
	w("\n")
	r.pacedMarkdown(b)
	r.interleavedMarkdown(b)
	r.turnsMarkdown(b)
}

// pacedMarkdown is the equal-load table.
func (r *Report) pacedMarkdown(b *strings.Builder) {
	if len(r.Paced) == 0 {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	x := cell2
	w("### At equal load\n\n")
	w("In a closed loop each server is driven as fast as it answers, and CPU per call falls as throughput rises (fuller batches, fewer wake-ups per call), so the cheaper server also gets a better rate. Here both run at c=%d paced (`loadgen -rate`) at %s of the slower one's closed-loop calls/s in the same repetition; the ratio is the median of the per-repetition ratios.\n\n", pacedConc, trimFloat(r.Config.PacedFraction*100)+" %")
	w("| protocol | calls/s asked | CPU ms / call: gateway | floor | × (per repetition) | allocs / call: gateway | floor | GCs / 10k calls: gateway | floor | calls/s reached: gateway | floor |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Paced {
		w("| %s | %.0f | %.3f | %.3f | %s (%s) | %.0f | %.0f | %s | %s | %.0f | %.0f |\n", p.Protocol, p.Rate, p.Toolgate.CPUMSPerCall, p.Floor.CPUMSPerCall,
			x(p.CPURatio), list2(p.Ratios), p.Toolgate.MallocsPerCall, p.Floor.MallocsPerCall, x(p.Toolgate.GCPer10kCalls), x(p.Floor.GCPer10kCalls), p.Toolgate.RPS, p.Floor.RPS)
	}
	w("\n")
}

func authText(a string) string {
	if a == "api-key" {
		return "an API key checked"
	}
	if a == "" {
		return "authentication as configured"
	}
	return a
}

// logFloor prints the gateway beside the floor, and the headline ratios.
func (r *Report) logFloor() {
	f := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf("%.2f×", *v)
	}
	x := cell2
	for _, row := range r.Floor {
		logf("floor %-4s c=%-3d CPU ms/call %.3f vs floor %.3f (%s)  allocs/call %.0f vs %.0f (%s)  GCs/10k calls %s vs %s  p50 added %s vs %s ms  p99 added %s vs %s ms",
			row.Protocol, row.Concurrency, row.Toolgate.CPUMSPerCall, row.Floor.CPUMSPerCall, f(row.CPURatio),
			row.Toolgate.MallocsPerCall, row.Floor.MallocsPerCall, f(row.MallocsRatio), x(row.Toolgate.GCPer10kCalls), x(row.Floor.GCPer10kCalls),
			x(row.Toolgate.P50AddedMS), x(row.Floor.P50AddedMS), x(row.Toolgate.P99AddedMS), x(row.Floor.P99AddedMS))
	}
	var parts []string
	for _, row := range r.Interleaved {
		logf("interleaved %-4s c=%-3d CPU ms/call %.3f vs floor %.3f (%s, per repetition %v)  p50 %.2f vs %.2f ms  p50 added %s vs %s ms (%s, per repetition %v)",
			row.Protocol, row.Concurrency, row.Toolgate.CPUMSPerCall, row.Floor.CPUMSPerCall, f(row.CPURatio), row.CPURatios,
			row.Toolgate.P50MS, row.Floor.P50MS, x(row.Toolgate.P50AddedMS), x(row.Floor.P50AddedMS), f(row.P50AddedRatio), row.P50AddedRatios)
	}
	for _, row := range r.Turns {
		logf("turns %-4s c=1  p50 direct %.3f, gateway %.3f, floor %.3f ms  added %.3f vs %.3f ms (%s, per repetition %v)",
			row.Protocol, row.DirectP50MS, row.ToolgateP50MS, row.FloorP50MS, row.ToolgateAdded, row.FloorAdded, f(row.P50AddedRatio), row.P50AddedRatios)
	}
	for _, k := range []string{"cpu_vs_floor_grpc_interleaved", "cpu_vs_floor_rest_interleaved", "p50_added_vs_floor_c1_turns", "p50_added_vs_floor_c1_rest_turns",
		"p50_added_vs_floor_c1_interleaved", "p50_added_vs_floor_c1_rest_interleaved",
		"mallocs_vs_floor_grpc_interleaved", "mallocs_vs_floor_rest_interleaved",
		"cpu_vs_floor_grpc", "cpu_vs_floor_rest", "cpu_vs_floor_grpc_paired", "cpu_vs_floor_rest_paired",
		"cpu_vs_floor_grpc_equal_load", "cpu_vs_floor_rest_equal_load", "mallocs_vs_floor_grpc", "mallocs_vs_floor_rest",
		"p50_added_vs_floor_c1", "p50_added_vs_floor_c1_rest", "mem_per_parked_call_vs_floor"} {
		if v, ok := r.Ratios[k].(float64); ok {
			parts = append(parts, fmt.Sprintf("%s %s", k, trimFloat(v)))
		}
	}
	if len(parts) > 0 {
		logf("gateway ÷ floor: %s", strings.Join(parts, ", "))
	}
}

// cell2 is a table cell with two decimals, or "–" for none.
func cell2(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", *v)
}

// list2 is a comma-separated list with two decimals each.
func list2(v []float64) string {
	s := make([]string, len(v))
	for i, f := range v {
		s[i] = fmt.Sprintf("%.2f", f)
	}
	return strings.Join(s, ", ")
}

// busMarkdown is the requests the gateway published to the bus per call,
// and the hedges among them, for the unary gateway rows that report them:
// on the happy path one publish a call, no hedge.
func (r *Report) busMarkdown(b *strings.Builder) {
	var rows []Point
	for _, p := range r.Runs {
		if p.GatewayPublishedPerCall != nil {
			rows = append(rows, p)
		}
	}
	if len(rows) == 0 {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### Requests on the bus per call (medians)\n\n")
	w("From the gateway's `toolgate_bridge_published_total` and `toolgate_bridge_hedged_total` over each window, per call completed: a call publishes its request once; a hedge (`--hedge-after`, on by default) publishes a silent call's request again.\n\n")
	w("| mode | c | requests published / call | hedges / call |\n|---|---:|---:|---:|\n")
	for _, p := range rows {
		hedged := "–"
		if p.GatewayHedgedPerCall != nil {
			hedged = fmt.Sprintf("%.4f", *p.GatewayHedgedPerCall)
		}
		w("| %s | %d | %.4f | %s |\n", p.Mode, p.Concurrency, *p.GatewayPublishedPerCall, hedged)
	}
	w("\n")
}
