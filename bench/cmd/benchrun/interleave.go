package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The interleaved phase compares the gateway with the floor without the
// machine's drift between their points. In the matrix each server has its
// own 10 s window, one after the other, and on this machine two windows a
// minute apart can differ by 20 % in latency and CPU per call with the same
// binary; the pair's ratio then carries that noise, and with three
// repetitions the order (who runs first) cannot be balanced. Here a fresh
// gateway and a fresh floor are both up at once, each behind a fresh echo
// service of its own (the idle one receives nothing: the gateway also
// listens on the shared response topic of its echo service, so a shared
// one would have it read the floor's replies; and fresh ones start from
// the same state), and they take turns in short windows, A B B A
// A B …, A alternating by repetition; at c=1 a direct window starts each
// pair, for the latency added over it. Each server's windows are then
// added up.

// interleaveWanted says whether the interleaved phase runs.
func (e *env) interleaveWanted() bool {
	if len(e.cfg.Interleave) == 0 || e.cfg.InterleaveSlices < 1 {
		return false
	}
	return hasPair(e.cfg.Modes, "grpc") || hasPair(e.cfg.Modes, "rest")
}

// hasPair says whether modes hold proto and its floor.
func hasPair(modes []string, proto string) bool {
	return slices.Contains(modes, proto) && slices.Contains(modes, "floor-"+proto)
}

// interleaveOrder is the order of the windows at concurrency c in
// repetition r: n blocks of the pair, A B then B A and so on (A = the
// gateway in even repetitions, the floor in odd ones); at c=1 each block
// starts with a direct window, so the direct reference is taken all
// along, next to each server equally often.
func interleaveOrder(proto string, c, n, r int) []string {
	a, b := proto, "floor-"+proto
	if r%2 == 1 {
		a, b = b, a
	}
	var out []string
	for i := range n {
		if c == 1 {
			out = append(out, "direct")
		}
		if i%2 == 0 {
			out = append(out, a, b)
		} else {
			out = append(out, b, a)
		}
	}
	return out
}

// interleavedRep runs the interleaved phase of repetition r.
func (e *env) interleavedRep(ctx context.Context, rep *Report, r int) error {
	if !e.interleaveWanted() {
		return nil
	}
	if e.gateway != nil { // the matrix's server, when it is kept
		e.gateway.stop(15 * time.Second)
		e.gateway = nil
	}
	winS := e.cfg.DurationS / float64(e.cfg.InterleaveSlices)
	warmS := min(e.cfg.WarmupS, 1) // the servers stay up: one second to settle at the new concurrency
	for _, proto := range rotate([]string{"grpc", "rest"}, r) {
		if !hasPair(e.cfg.Modes, proto) {
			continue
		}
		// Each server gets a fresh echo service of its own for the pair,
		// so that neither is served by one with a different history (the
		// matrix's has served every point before).
		gwTopic, flTopic := fmt.Sprintf("%s-i%d-%s-gw", e.tag, r+1, proto), fmt.Sprintf("%s-i%d-%s-fl", e.tag, r+1, proto)
		p, err := e.startPair(ctx, gwTopic, flTopic)
		if err != nil {
			e.failures++
			logf("interleaved rep %d %s: %v", r+1, proto, err)
			continue
		}
		targets := map[string]target{
			proto:            {srv: p.gw, echo: p.gwEcho, topic: gwTopic},
			"floor-" + proto: {srv: p.fl, echo: p.flEcho, topic: flTopic},
			"direct":         {echo: e.echoD, topic: e.topicD},
		}
		for _, c := range e.cfg.Interleave {
			for i, mode := range interleaveOrder(proto, c, e.cfg.InterleaveSlices, r) {
				s := e.load(ctx, mode, c, warmS, winS, 0, 0, targets[mode])
				s.Rep, s.Window, s.Protocol = r, i, proto
				rep.InterleavedSamples = append(rep.InterleavedSamples, s)
				logf("interleaved rep %d %-10s c=%-3d window %d: %s", r+1, mode, c, i+1, s.line())
				if ctx.Err() != nil {
					p.stop()
					return ctx.Err()
				}
			}
			if c == 1 && e.cfg.TurnCalls > 0 {
				e.turnsRun(ctx, rep, r, proto, targets, warmS)
			}
		}
		p.stop()
	}
	return nil
}

// pair is the interleaved phase's gateway and floor, each with its echo
// service.
type pair struct{ gw, fl, gwEcho, flEcho *child }

func (p *pair) stop() {
	for _, c := range []*child{p.gw, p.fl, p.gwEcho, p.flEcho} {
		if c != nil {
			c.stop(15 * time.Second)
		}
	}
}

// startPair starts two echo services, on gwTopic and flTopic, a gateway
// for the first and a floor for the second.
func (e *env) startPair(ctx context.Context, gwTopic, flTopic string) (*pair, error) {
	p := &pair{}
	var err error
	fail := func(what string, err error) (*pair, error) {
		p.stop()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if p.gwEcho, err = e.startEcho("echo-"+gwTopic, gwTopic); err != nil {
		return fail("echo service", err)
	}
	if p.flEcho, err = e.startEcho("echo-"+flTopic, flTopic); err != nil {
		return fail("echo service", err)
	}
	reg, err := e.registryFor("registry-"+gwTopic+".yaml", gwTopic)
	if err != nil {
		return fail("registry", err)
	}
	if p.gw, err = e.startGatewayWith(ctx, e.gwBin, false, reg); err != nil {
		return fail("gateway", err)
	}
	if p.fl, err = e.startFloorOn(ctx, flTopic, false); err != nil {
		return fail("floor", err)
	}
	return p, nil
}

// InterleavedRow is the gateway beside the floor in the interleaved phase
// at one protocol and concurrency. Per repetition each server's windows
// are added up (CPU and allocations per call over all their calls, p50
// and p99 the mean of the windows'); the sides are the medians of that
// over repetitions, the ratios the medians of the per-repetition ratios.
type InterleavedRow struct {
	Protocol    string    `json:"protocol"`
	Concurrency int       `json:"concurrency"`
	Windows     int       `json:"windows_per_server"`
	Toolgate    FloorSide `json:"toolgate"`
	Floor       FloorSide `json:"floor"`
	CPURatio    *float64  `json:"cpu_vs_floor,omitempty"`
	CPURatios   []float64 `json:"cpu_vs_floor_per_repetition,omitempty"`
	// MallocsRatio: allocations per call, median of the per-repetition
	// ratios.
	MallocsRatio *float64 `json:"mallocs_vs_floor,omitempty"`
	// P50AddedRatio: the p50 each adds over direct (c=1), a ratio only
	// where the floor adds at least 0.05 ms.
	P50AddedRatio  *float64  `json:"p50_added_vs_floor,omitempty"`
	P50AddedRatios []float64 `json:"p50_added_vs_floor_per_repetition,omitempty"`
}

// windowSum is one server's windows in one repetition, added up.
type windowSum struct {
	calls              float64
	cpu1k, mallocs, gc float64 // weighted by calls
	p50, p99, rps      float64 // means
	n                  int
	gcKnown            bool
}

func sumWindows(samples []*Sample, proto, mode string, c, r int) (windowSum, bool) {
	var w windowSum
	for _, s := range samples {
		if s.Protocol != proto || s.Mode != mode || s.Concurrency != c || s.Rep != r || s.Failed != "" || s.Calls == 0 {
			continue
		}
		n := float64(s.Calls)
		w.calls += n
		w.p50 += s.P50
		w.p99 += s.P99
		w.rps += s.RPS
		w.n++
		if s.Gateway != nil {
			w.cpu1k += s.Gateway.CPUSPer1kCall * n
			w.mallocs += s.Gateway.MallocsPerCall * n
			if s.Gateway.GCCycles > 0 {
				w.gc += float64(s.Gateway.GCCycles)
				w.gcKnown = true
			}
		}
	}
	if w.n == 0 {
		return w, false
	}
	k := float64(w.n)
	w.p50, w.p99, w.rps = w.p50/k, w.p99/k, w.rps/k
	w.cpu1k, w.mallocs = w.cpu1k/w.calls, w.mallocs/w.calls
	w.gc = w.gc / w.calls * 1e4
	return w, true
}

// sideVals collects one server's per-repetition figures.
type sideVals struct{ cpu, mal, gc, p50, p99, rps, a50, a99 []float64 }

// add takes one repetition's windows, and their latency over direct's
// when d is not nil.
func (s *sideVals) add(w windowSum, d *windowSum) {
	s.cpu = append(s.cpu, w.cpu1k)
	s.mal = append(s.mal, w.mallocs)
	if w.gcKnown {
		s.gc = append(s.gc, w.gc)
	}
	s.p50 = append(s.p50, w.p50)
	s.p99 = append(s.p99, w.p99)
	s.rps = append(s.rps, w.rps)
	if d != nil {
		s.a50 = append(s.a50, w.p50-d.p50)
		s.a99 = append(s.a99, w.p99-d.p99)
	}
}

// side is the medians over repetitions.
func (s *sideVals) side() FloorSide {
	fs := FloorSide{RPS: round(median(s.rps), 1), CPUMSPerCall: round(median(s.cpu), 4), MallocsPerCall: round(median(s.mal), 1),
		P50MS: round(median(s.p50), 3), P99MS: round(median(s.p99), 3)}
	if len(s.gc) > 0 {
		v := round(median(s.gc), 2)
		fs.GCPer10kCalls = &v
	}
	if len(s.a50) > 0 {
		a50, a99 := round(median(s.a50), 3), round(median(s.a99), 3)
		fs.P50AddedMS, fs.P99AddedMS = &a50, &a99
	}
	return fs
}

// summarizeInterleaved sets the interleaved rows and their headline
// ratios (cpu_vs_floor_*_interleaved at c=64, p50_added_vs_floor_c1*_interleaved).
func (r *Report) summarizeInterleaved() {
	r.Interleaved = nil
	repList := repetitions(r.InterleavedSamples)
	for _, proto := range []string{"grpc", "rest"} {
		for _, c := range r.Config.Interleave {
			row := InterleavedRow{Protocol: proto, Concurrency: c, Windows: r.Config.InterleaveSlices}
			var tg, fl sideVals
			var ratios pairRatios
			for _, rp := range repList {
				t, ok1 := sumWindows(r.InterleavedSamples, proto, proto, c, rp)
				f, ok2 := sumWindows(r.InterleavedSamples, proto, "floor-"+proto, c, rp)
				if !ok1 || !ok2 {
					continue
				}
				var dp *windowSum
				if d, ok := sumWindows(r.InterleavedSamples, proto, "direct", c, rp); ok {
					dp = &d
					if fa := f.p50 - d.p50; fa >= 0.05 {
						row.P50AddedRatios = append(row.P50AddedRatios, round((t.p50-d.p50)/fa, 3))
					}
				}
				tg.add(t, dp)
				fl.add(f, dp)
				ratios.add(t, f)
			}
			if len(tg.cpu) == 0 {
				continue
			}
			row.Toolgate, row.Floor = tg.side(), fl.side()
			row.CPURatios = ratios.cpu
			row.CPURatio, row.MallocsRatio = medianOf(ratios.cpu), medianOf(ratios.mallocs)
			row.P50AddedRatio = medianOf(row.P50AddedRatios)
			if c == 64 {
				r.setRatio("cpu_vs_floor_"+proto+"_interleaved", row.CPURatio)
				r.setRatio("mallocs_vs_floor_"+proto+"_interleaved", row.MallocsRatio)
			}
			if c == 1 {
				suffix := map[string]string{"grpc": "", "rest": "_rest"}[proto]
				r.setRatio("p50_added_vs_floor_c1"+suffix+"_interleaved", row.P50AddedRatio)
			}
			r.Interleaved = append(r.Interleaved, row)
		}
	}
}

// repetitions lists, in order, the repetitions samples come from.
func repetitions(samples []*Sample) []int {
	reps := map[int]bool{}
	for _, s := range samples {
		reps[s.Rep] = true
	}
	return slices.Sorted(maps.Keys(reps))
}

// pairRatios gathers, one repetition at a time, the ratios of one side's
// CPU and allocations per call to another's.
type pairRatios struct {
	cpu, mallocs []float64
}

// add records a's ratios to b, where both measured something.
func (p *pairRatios) add(a, b windowSum) {
	if a.cpu1k > 0 && b.cpu1k > 0 {
		p.cpu = append(p.cpu, round(a.cpu1k/b.cpu1k, 3))
	}
	if a.mallocs > 0 && b.mallocs > 0 {
		p.mallocs = append(p.mallocs, a.mallocs/b.mallocs)
	}
}

// medianOf is the median of vs, rounded, or nil when vs is empty.
func medianOf(vs []float64) *float64 {
	if len(vs) == 0 {
		return nil
	}
	v := round(median(vs), 3)
	return &v
}

// setRatio sets one of latest.json's ratios when v is measured.
func (r *Report) setRatio(name string, v *float64) {
	if v != nil {
		r.Ratios[name] = *v
	}
}

// interleavedMarkdown is the interleaved phase's table.
func (r *Report) interleavedMarkdown(b *strings.Builder) {
	if len(r.Interleaved) == 0 {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	x := cell2
	per := list2
	w("### Interleaved, both up\n\n")
	w("The same comparison without the machine's drift between points: after each repetition a fresh gateway and a fresh floor are both up, each behind a fresh echo service of its own, and take turns in %s s windows (%d each, A B B A …, who goes first alternating by repetition; at c=1 a direct window before each pair, for the added latency). Each server's windows in a repetition are added up; a ratio is the median of the per-repetition ratios (listed).\n\n",
		trimFloat(r.Config.DurationS/float64(max(r.Config.InterleaveSlices, 1))), r.Config.InterleaveSlices)
	w("| protocol | c | CPU ms / call: gateway | floor | × (per repetition) | allocs / call: gateway | floor | × | p50 added over direct, ms: gateway | floor | × (per repetition) | p50 ms: gateway | floor | calls/s: gateway | floor |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range r.Interleaved {
		p50x := x(row.P50AddedRatio)
		if len(row.P50AddedRatios) > 0 {
			p50x += " (" + per(row.P50AddedRatios) + ")"
		}
		w("| %s | %d | %.3f | %.3f | %s (%s) | %.0f | %.0f | %s | %s | %s | %s | %.2f | %.2f | %.0f | %.0f |\n", row.Protocol, row.Concurrency,
			row.Toolgate.CPUMSPerCall, row.Floor.CPUMSPerCall, x(row.CPURatio), per(row.CPURatios),
			row.Toolgate.MallocsPerCall, row.Floor.MallocsPerCall, x(row.MallocsRatio),
			x(row.Toolgate.P50AddedMS), x(row.Floor.P50AddedMS), p50x,
			row.Toolgate.P50MS, row.Floor.P50MS, row.Toolgate.RPS, row.Floor.RPS)
	}
	w("\n")
}
