package main

import "fmt"

// goals are the goals in force, each a ratio of latest.json's that must
// not exceed max. All are measured against the floor (bench/cmd/floorgw: a
// gateway doing only the bridge's job) or against another door, in the
// same run and taking turns, so that the machine's drift cancels.
var goals = []struct {
	name  string
	ratio string
	max   float64
}{
	{"gRPC: gateway CPU per call ÷ the floor's, c=64, interleaved", "cpu_vs_floor_grpc_interleaved", 1.15},
	{"REST: gateway CPU per call ÷ the floor's, c=64, interleaved", "cpu_vs_floor_rest_interleaved", 1.15},
	{"gRPC: p50 added over direct ÷ the floor's, c=1, taking turns call by call", "p50_added_vs_floor_c1_turns", 1.2},
	{"REST: p50 added over direct ÷ the floor's, c=1, taking turns call by call", "p50_added_vs_floor_c1_rest_turns", 1.2},
	{"memory per parked call ÷ the floor's", "mem_per_parked_call_vs_floor", 1.25},
	{"MCP 2025-11-25: gateway CPU per call ÷ REST's, c=64, one gateway", "cpu_mcp_vs_rest_interleaved", 1.5},
	{"MCP 2026-07-28: gateway CPU per call ÷ REST's, c=64, one gateway", "cpu_mcp_2026_vs_rest_interleaved", 1.5},
	{"Connect (unary JSON): gateway CPU per call ÷ REST's, c=64, one gateway", "cpu_connect_vs_rest_interleaved", 1.25},
}

// Goal is one goal in force and what this run measured of it.
type Goal struct {
	Name     string  `json:"name"`
	Ratio    string  `json:"ratio"`
	Max      float64 `json:"max"`
	Measured float64 `json:"measured"`
	Met      bool    `json:"met"`
}

// summarizeGoals sets r.Goals from the ratios the run measured.
func (r *Report) summarizeGoals() {
	r.Goals = nil
	for _, g := range goals {
		v, ok := r.Ratios[g.ratio].(float64)
		if !ok {
			continue
		}
		r.Goals = append(r.Goals, Goal{Name: g.name, Ratio: g.ratio, Max: g.max, Measured: v, Met: v <= g.max})
	}
}

// goalsMarkdown writes the goals table: every goal in force, measured or
// not in this run.
func (r *Report) goalsMarkdown(w func(format string, args ...any)) {
	w("## Goals in force\n\n| goal | at most | measured | met |\n|---|---:|---:|---|\n")
	for _, g := range goals {
		measured, met := "not measured in this run", "–"
		for _, m := range r.Goals {
			if m.Ratio == g.ratio {
				measured, met = fmt.Sprintf("%s×", trimFloat(m.Measured)), "no"
				if m.Met {
					met = "yes"
				}
			}
		}
		w("| %s (`%s`) | %s× | %s | %s |\n", g.name, g.ratio, trimFloat(g.max), measured, met)
	}
	w("\nRatios to direct and to the Python service stay in summary.json for reference; on one shared machine they mostly measure the load generator and the shared CPU (ANALYSIS.md).\n\n")
}
