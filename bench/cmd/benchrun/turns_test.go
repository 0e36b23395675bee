package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/loadresult"
)

func turnsSample(proto string, rep int, direct, gw, floor float64) *Sample {
	s := &Sample{Result: loadresult.Result{Mode: "turns", Concurrency: 1}, Rep: rep, Protocol: proto}
	for _, t := range []struct {
		name string
		p50  float64
	}{{"direct", direct}, {proto, gw}, {"floor-" + proto, floor}} {
		s.Turns = append(s.Turns, loadresult.Turn{Name: t.name, Calls: 3000, P50: t.p50})
	}
	return s
}

func TestSummarizeTurns(t *testing.T) {
	r := &Report{Config: Config{Interleave: []int{1}, TurnCalls: 100, TurnSkip: 10, DurationS: 10}}
	failed := turnsSample("grpc", 2, 0.2, 9, 0.3)
	failed.Failed = "loadgen: exit 1"
	r.TurnSamples = []*Sample{
		turnsSample("grpc", 0, 0.2, 0.33, 0.3),   // 1.3
		turnsSample("grpc", 1, 0.25, 0.37, 0.35), // 1.2
		turnsSample("grpc", 2, 0.2, 0.31, 0.3),   // 1.1
		failed,
		// REST: the floor adds under 0.05 ms in each: no ratio
		turnsSample("rest", 0, 0.2, 0.3, 0.24),
	}
	r.summarize()
	if got, ok := r.Ratios["p50_added_vs_floor_c1_turns"].(float64); !ok || got != 1.2 {
		t.Errorf("p50_added_vs_floor_c1_turns = %v, want 1.2 (median of 1.3, 1.2, 1.1)", r.Ratios["p50_added_vs_floor_c1_turns"])
	}
	if v, ok := r.Ratios["p50_added_vs_floor_c1_rest_turns"]; ok {
		t.Errorf("p50_added_vs_floor_c1_rest_turns = %v, want none (the floor added 0.04 ms)", v)
	}
	if len(r.Turns) != 2 {
		t.Fatalf("turns rows %+v, want gRPC and REST", r.Turns)
	}
	g := r.Turns[0]
	if !slices.Equal(g.P50AddedRatios, []float64{1.3, 1.2, 1.1}) || g.DirectP50MS != 0.2 || g.ToolgateAdded != 0.12 || g.FloorAdded != 0.1 {
		t.Errorf("gRPC row %+v", g)
	}
	var goal *Goal
	for i := range r.Goals {
		if r.Goals[i].Ratio == "p50_added_vs_floor_c1_turns" {
			goal = &r.Goals[i]
		}
	}
	if goal == nil || !goal.Met {
		t.Errorf("the c=1 gRPC goal reads the turns: %+v", r.Goals)
	}
	var b strings.Builder
	r.turnsMarkdown(&b)
	if !strings.Contains(b.String(), "| grpc | 0.200 | 0.330 | 0.300 | 0.120 | 0.100 | 1.20 (1.30, 1.20, 1.10) |") {
		t.Errorf("turns table:\n%s", b.String())
	}
}
