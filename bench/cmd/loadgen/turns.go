package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Turns: calls taken in turn by several targets from the same workers, so
// that consecutive calls to each meet the machine in the same state. Used
// for latency at one call in flight, where a separate window for each
// target measures mostly the machine's drift between the windows (on a
// shared 2-core machine the p50 of two windows a few seconds apart can
// differ by 0.2 ms, more than what a forwarder adds).

// turnTarget is one target of -turns.
type turnTarget struct {
	name string
	opts Options
}

// parseTurns reads -turns: NAME=MODE@ADDRESS, comma-separated, where
// ADDRESS is the gRPC address (gRPC modes), the HTTP address (HTTP modes)
// or the short topic of the echo service (direct). Each target gets o's
// other settings.
func parseTurns(spec string, o Options) ([]turnTarget, error) {
	var ts []turnTarget
	for part := range strings.SplitSeq(spec, ",") {
		name, rest, ok1 := strings.Cut(strings.TrimSpace(part), "=")
		mode, addr, ok2 := strings.Cut(rest, "@")
		if !ok1 || !ok2 || name == "" || mode == "" || addr == "" {
			return nil, fmt.Errorf("-turns: want NAME=MODE@ADDRESS, got %q", part)
		}
		if slices.ContainsFunc(ts, func(t turnTarget) bool { return t.name == name }) {
			return nil, fmt.Errorf("-turns: %q named twice", name)
		}
		to := o
		to.Mode, to.Turns = mode, ""
		switch mode {
		case "direct":
			to.Topic = addr
		case "grpc", "connect", "grpcweb":
			to.GRPCAddr = addr
			if mode != "grpc" {
				to.HTTPAddr = addr
			}
		case "rest", "mcp", "mcp-2026":
			to.HTTPAddr = addr
		default:
			return nil, fmt.Errorf("-turns: mode %q cannot take turns (unary modes only)", mode)
		}
		ts = append(ts, turnTarget{name: name, opts: to})
	}
	if len(ts) < 2 {
		return nil, fmt.Errorf("-turns: want at least two targets")
	}
	return ts, nil
}

// runTurns runs o.Concurrency workers, each calling the targets in turn
// (o.TurnCalls calls a turn, the first o.TurnSkip of them not counted:
// the target warms up again after its rest) — the first target of each
// round moving on by one every round, so that none always follows the
// same other — until the window ends, and reports
// each target's latency apart (Result.Turns). The result's own figures
// are those of all calls together.
func runTurns(ctx context.Context, o Options) (*Result, error) {
	ts, err := parseTurns(o.Turns, o)
	if err != nil {
		return nil, err
	}
	callers := make([]Caller, len(ts))
	defer func() {
		for _, c := range callers {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i, t := range ts {
		if callers[i], err = newCaller(ctx, t.opts); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", t.name, t.opts.Mode, err)
		}
	}
	n := len(ts)
	rr := &roundRobin{callers: callers, stats: make([][]workerStats, o.Concurrency), round: make([]int, o.Concurrency),
		burst: max(o.TurnCalls, 1), skip: o.TurnSkip}
	for w := range rr.stats {
		rr.stats[w] = make([]workerStats, n)
	}
	res, err := runLoad(ctx, o, rr)
	if err != nil {
		return nil, err
	}
	res.Mode = "turns"
	for i, t := range ts {
		var lat []time.Duration
		tr := &Turn{Name: t.name, Mode: t.opts.Mode}
		for w := range rr.stats {
			st := &rr.stats[w][i]
			lat = append(lat, st.lat...)
			tr.Errors += st.errors
		}
		r := &Result{}
		summarize(r, lat, o.Duration)
		tr.Calls, tr.P50, tr.P90, tr.P99, tr.Mean = r.Calls, r.P50, r.P90, r.P99, r.Mean
		res.Turns = append(res.Turns, *tr)
	}
	return res, nil
}

// roundRobin is the Caller of the turns: each worker's calls go to the
// targets in turn, and each call's latency is kept for its target too.
// A worker's state is its own (runLoad gives each worker its index).
type roundRobin struct {
	callers          []Caller
	stats            [][]workerStats // per worker, per target
	round            []int           // per worker: calls made, for the rotation
	burst, skip      int             // calls per turn; of those, not counted
	winStart, winEnd time.Time       // the measured window (runLoad's)
}

// window takes the measured window from runLoad: calls that end outside
// it count for no target, as runLoad counts them for no result.
func (r *roundRobin) window(start, end time.Time) { r.winStart, r.winEnd = start, end }

// Call makes the worker's next call and records it against its target.
func (r *roundRobin) Call(ctx context.Context, worker int) (int, error) {
	n := len(r.callers)
	k := r.round[worker]
	r.round[worker]++
	t, j := k/r.burst, k%r.burst // the worker's turn t, its call j
	i := (t/n + t%n) % n         // round t/n of the turns starts at target t/n mod n
	start := time.Now()
	chunks, err := r.callers[i].Call(ctx, worker)
	end := time.Now()
	if j < r.skip || !start.Before(r.winEnd) || end.Before(r.winStart) || end.After(r.winEnd) {
		return chunks, err
	}
	st := &r.stats[worker][i]
	if err != nil {
		st.errors++
	} else {
		st.lat = append(st.lat, end.Sub(start))
	}
	return chunks, err
}

// Close is a no-op: runTurns closes the callers.
func (r *roundRobin) Close() {}
