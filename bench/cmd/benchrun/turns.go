package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/loadresult"
)

// Turns: latency at c=1 with the targets taking turns call by call. In
// the interleaved windows at c=1 (2.5 s each) the p50 of a window moves by
// up to ±0.2 ms against its neighbour's on this machine, while what a
// forwarder adds over direct is about 0.15 ms; a ratio of two such added
// latencies carries that noise. Here, after each repetition's interleaved
// windows at c=1, the same gateway, floor and direct reference run in one
// load client (loadgen -turns), which calls each in turn, TurnCalls calls
// a turn (the first TurnSkip not counted: the target warms up again after
// resting), the first target moving on every round. Each target's p50
// comes from calls made within a fraction of a second of the others', so
// the machine's drift falls on all three alike; the calls are made back
// to back as in the windows, so each target is as busy as in its own.

// turnsRun runs the turns of repetition r for proto, on the targets of
// the interleaved pair.
func (e *env) turnsRun(ctx context.Context, rep *Report, r int, proto string, targets map[string]target, warmS float64) {
	fl := "floor-" + proto
	addr := func(t target) string {
		if proto == "grpc" {
			return t.srv.grpcAddr
		}
		return t.srv.httpAddr
	}
	spec := fmt.Sprintf("direct=direct@%s,%s=%s@%s,%s=%s@%s", targets["direct"].topic,
		proto, proto, addr(targets[proto]), fl, proto, addr(targets[fl]))
	s := &Sample{Result: loadresult.Result{Mode: "turns", Concurrency: 1}, Rep: r, Protocol: proto}
	durS := e.cfg.DurationS
	timeout := time.Duration((warmS+durS)*float64(time.Second)) + 90*time.Second
	err := runJSON(ctx, timeout, s, filepath.Join(e.bin, "loadgen"), "-turns", spec, "-concurrency", "1",
		"-turn-calls", strconv.Itoa(e.cfg.TurnCalls), "-turn-skip", strconv.Itoa(e.cfg.TurnSkip),
		"-duration", ftoa(durS)+"s", "-warmup", ftoa(warmS)+"s", "-pulsar-url", e.pulsarURL,
		"-msg-size", strconv.Itoa(e.cfg.MsgSize), "-conns", strconv.Itoa(e.cfg.GRPCConns), "-api-key-file", e.keyFile)
	s.Mode, s.Rep, s.Protocol = "turns", r, proto
	s.LostRequests, s.LostReplies = -1, -1
	e.finish(s, err)
	rep.TurnSamples = append(rep.TurnSamples, s)
	logf("turns rep %d %-4s c=1: %s", r+1, proto, s.turnsLine())
}

// turnsLine is a turns sample's log line.
func (s *Sample) turnsLine() string {
	if s.Failed != "" {
		return "FAILED: " + firstLine(s.Failed)
	}
	var parts []string
	for _, t := range s.Turns {
		parts = append(parts, fmt.Sprintf("%s %d calls p50 %.3f p99 %.3f ms errors %d", t.Name, t.Calls, t.P50, t.P99, t.Errors))
	}
	return strings.Join(parts, "; ")
}

// TurnsRow is one protocol's turns: the medians over repetitions of each
// target's p50 and of the p50 the gateway and the floor add over direct,
// and the ratio of those (median of the per-repetition ratios, a ratio
// only where the floor adds at least 0.05 ms).
type TurnsRow struct {
	Protocol       string    `json:"protocol"`
	TurnCalls      int       `json:"turn_calls"`
	DirectP50MS    float64   `json:"direct_p50_ms"`
	ToolgateP50MS  float64   `json:"toolgate_p50_ms"`
	FloorP50MS     float64   `json:"floor_p50_ms"`
	ToolgateAdded  float64   `json:"toolgate_p50_added_ms"`
	FloorAdded     float64   `json:"floor_p50_added_ms"`
	CallsPerTarget int       `json:"calls_per_target"`
	Errors         int       `json:"errors"`
	P50AddedRatio  *float64  `json:"p50_added_vs_floor,omitempty"`
	P50AddedRatios []float64 `json:"p50_added_vs_floor_per_repetition,omitempty"`
}

// summarizeTurns sets the turns rows and p50_added_vs_floor_c1*_turns.
func (r *Report) summarizeTurns() {
	r.Turns = nil
	for _, proto := range []string{"grpc", "rest"} {
		row := TurnsRow{Protocol: proto, TurnCalls: r.Config.TurnCalls}
		var d, t, f, ta, fa []float64
		calls := 0
		for _, s := range r.TurnSamples {
			if s.Protocol != proto || s.Failed != "" {
				continue
			}
			by := map[string]loadresult.Turn{}
			for _, x := range s.Turns {
				by[x.Name] = x
				row.Errors += x.Errors
			}
			dt, ok1 := by["direct"]
			tt, ok2 := by[proto]
			ft, ok3 := by["floor-"+proto]
			if !ok1 || !ok2 || !ok3 || dt.Calls == 0 || tt.Calls == 0 || ft.Calls == 0 {
				continue
			}
			d, t, f = append(d, dt.P50), append(t, tt.P50), append(f, ft.P50)
			ta, fa = append(ta, tt.P50-dt.P50), append(fa, ft.P50-dt.P50)
			calls += min(tt.Calls, ft.Calls, dt.Calls)
			if ft.P50-dt.P50 >= 0.05 {
				row.P50AddedRatios = append(row.P50AddedRatios, round((tt.P50-dt.P50)/(ft.P50-dt.P50), 3))
			}
		}
		if len(d) == 0 {
			continue
		}
		row.DirectP50MS, row.ToolgateP50MS, row.FloorP50MS = round(median(d), 3), round(median(t), 3), round(median(f), 3)
		row.ToolgateAdded, row.FloorAdded = round(median(ta), 3), round(median(fa), 3)
		row.CallsPerTarget = calls / len(d)
		row.P50AddedRatio = medianOf(row.P50AddedRatios)
		suffix := map[string]string{"grpc": "", "rest": "_rest"}[proto]
		r.setRatio("p50_added_vs_floor_c1"+suffix+"_turns", row.P50AddedRatio)
		r.Turns = append(r.Turns, row)
	}
}

// turnsMarkdown is the turns' table.
func (r *Report) turnsMarkdown(b *strings.Builder) {
	if len(r.Turns) == 0 {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### Latency at c=1, taking turns call by call\n\n")
	w("After each repetition's interleaved windows at c=1, the same gateway and floor and the direct reference take turns in one load client: %d calls a turn (the first %d of each not counted), the first target moving on every round, for %s s. Each target's p50 comes from calls made within a fraction of a second of the others', which the windows above cannot give (their p50 moves by up to ±0.2 ms from one window to the next on this machine). Medians over repetitions; the ratio is the median of the per-repetition ratios (listed). This is the c=1 latency goal's figure.\n\n",
		r.Config.TurnCalls, r.Config.TurnSkip, trimFloat(r.Config.DurationS))
	w("| protocol | p50 ms: direct | gateway | floor | added over direct, ms: gateway | floor | × (per repetition) | calls per target and repetition | errors |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range r.Turns {
		x := cell2(row.P50AddedRatio)
		if len(row.P50AddedRatios) > 0 {
			x += " (" + list2(row.P50AddedRatios) + ")"
		}
		w("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %d | %d |\n", row.Protocol, row.DirectP50MS, row.ToolgateP50MS, row.FloorP50MS,
			row.ToolgateAdded, row.FloorAdded, x, row.CallsPerTarget, row.Errors)
	}
	w("\n")
}
