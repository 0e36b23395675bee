package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The doors phase compares the gateway's doors with each other on one
// gateway: after each repetition a fresh gateway behind a fresh echo
// service serves REST, MCP, Connect and gRPC calls in turn, in short
// windows at one concurrency, each block of windows a rotation of the
// last (who goes first moves along), so that every door sees the same
// machine and the same gateway. Each door's windows in a repetition are
// added up; a ratio to REST is the median of the per-repetition ratios.

// doorsWanted says whether the doors phase runs.
func (e *env) doorsWanted() bool {
	return len(e.cfg.Doors) > 1 && e.cfg.DoorsConcurrency > 0 && e.cfg.DoorsWindows > 0
}

// doorsOrder is the order of the windows in repetition r: n blocks, each
// a rotation of doors.
func doorsOrder(doors []string, n, r int) []string {
	var out []string
	for i := range n {
		out = append(out, rotate(doors, i+r)...)
	}
	return out
}

// doorsRep runs the doors phase of repetition r.
func (e *env) doorsRep(ctx context.Context, rep *Report, r int) error {
	if !e.doorsWanted() {
		return nil
	}
	if e.gateway != nil { // the matrix's server, when it is kept
		e.gateway.stop(15 * time.Second)
		e.gateway = nil
	}
	topic := fmt.Sprintf("%s-d%d", e.tag, r+1)
	echo, err := e.startEcho("echo-"+topic, topic)
	if err != nil {
		e.failures++
		logf("doors rep %d: echo service: %v", r+1, err)
		return nil
	}
	defer echo.stop(15 * time.Second)
	reg, err := e.registryFor("registry-"+topic+".yaml", topic)
	if err != nil {
		return err
	}
	gw, err := e.startGatewayWith(ctx, e.gwBin, false, reg)
	if err != nil {
		e.failures++
		logf("doors rep %d: gateway: %v", r+1, err)
		return nil
	}
	defer gw.stop(15 * time.Second)
	winS := e.cfg.DurationS / float64(e.cfg.DoorsWindows)
	warmS := min(e.cfg.WarmupS, 1)
	c := e.cfg.DoorsConcurrency
	for i, mode := range doorsOrder(e.cfg.Doors, e.cfg.DoorsWindows, r) {
		s := e.load(ctx, mode, c, warmS, winS, 0, 0, target{srv: gw, echo: echo, topic: topic})
		s.Rep, s.Window, s.Protocol = r, i, "doors"
		rep.DoorSamples = append(rep.DoorSamples, s)
		logf("doors rep %d %-8s c=%-3d window %d: %s", r+1, mode, c, i+1, s.line())
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// DoorRow is one door in the doors phase: its figures (medians over
// repetitions of each repetition's windows added up) and its CPU and
// allocations per call over REST's.
type DoorRow struct {
	Door        string    `json:"door"`
	Concurrency int       `json:"concurrency"`
	Windows     int       `json:"windows_per_door"`
	Side        FloorSide `json:"figures"`
	CPUvsREST   *float64  `json:"cpu_vs_rest,omitempty"`
	CPURatios   []float64 `json:"cpu_vs_rest_per_repetition,omitempty"`
	// MallocsVsREST: allocations per call over REST's, median of the
	// per-repetition ratios.
	MallocsVsREST *float64 `json:"mallocs_vs_rest,omitempty"`
}

// summarizeDoors sets the doors rows and the ratios
// cpu_<door>_vs_rest_interleaved and mallocs_<door>_vs_rest_interleaved.
func (r *Report) summarizeDoors() {
	r.Doors = nil
	repList := repetitions(r.DoorSamples)
	c := r.Config.DoorsConcurrency
	for _, door := range r.Config.Doors {
		row := DoorRow{Door: door, Concurrency: c, Windows: r.Config.DoorsWindows}
		var side sideVals
		var ratios pairRatios
		for _, rp := range repList {
			d, ok := sumWindows(r.DoorSamples, "doors", door, c, rp)
			if !ok {
				continue
			}
			side.add(d, nil)
			rest, ok := sumWindows(r.DoorSamples, "doors", "rest", c, rp)
			if !ok || door == "rest" {
				continue
			}
			ratios.add(d, rest)
		}
		if len(side.cpu) == 0 {
			continue
		}
		row.Side = side.side()
		row.CPURatios = ratios.cpu
		row.CPUvsREST, row.MallocsVsREST = medianOf(ratios.cpu), medianOf(ratios.mallocs)
		key := strings.ReplaceAll(door, "-", "_")
		r.setRatio("cpu_"+key+"_vs_rest_interleaved", row.CPUvsREST)
		r.setRatio("mallocs_"+key+"_vs_rest_interleaved", row.MallocsVsREST)
		r.Doors = append(r.Doors, row)
	}
}

// doorsMarkdown is the doors phase's table.
func (r *Report) doorsMarkdown(b *strings.Builder) {
	if len(r.Doors) == 0 {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### The doors on one gateway, interleaved\n\n")
	w("After each repetition a fresh gateway behind a fresh echo service serves each door in turn at c=%d, in %s s windows (%d per door, each block a rotation of the last). Each door's windows in a repetition are added up; a ratio to REST is the median of the per-repetition ratios (listed).\n\n",
		r.Config.DoorsConcurrency, trimFloat(r.Config.DurationS/float64(max(r.Config.DoorsWindows, 1))), r.Config.DoorsWindows)
	w("| door | CPU ms / call | × REST (per repetition) | allocs / call | × REST | p50 ms | p99 ms | calls/s |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range r.Doors {
		cpu := cell2(row.CPUvsREST)
		if len(row.CPURatios) > 0 {
			cpu += " (" + list2(row.CPURatios) + ")"
		}
		w("| %s | %.3f | %s | %.0f | %s | %.2f | %.2f | %.0f |\n", row.Door, row.Side.CPUMSPerCall, cpu,
			row.Side.MallocsPerCall, cell2(row.MallocsVsREST), row.Side.P50MS, row.Side.P99MS, row.Side.RPS)
	}
	w("\n")
}
