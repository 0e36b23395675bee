package main

import (
	"slices"
	"strings"
	"testing"
)

func TestDoorsOrder(t *testing.T) {
	doors := []string{"rest", "mcp", "connect"}
	got := doorsOrder(doors, 3, 0)
	want := []string{"rest", "mcp", "connect", "mcp", "connect", "rest", "connect", "rest", "mcp"}
	if !slices.Equal(got, want) {
		t.Fatalf("doorsOrder = %q, want %q", got, want)
	}
	// Over the blocks every door goes first once, and the next repetition
	// starts one further on.
	if next := doorsOrder(doors, 1, 1); next[0] != "mcp" {
		t.Fatalf("repetition 1 starts with %q", next[0])
	}
}

func TestSummarizeDoors(t *testing.T) {
	r := &Report{Config: Config{Doors: []string{"rest", "mcp"}, DoorsConcurrency: 64, DoorsWindows: 2, DurationS: 10}, Ratios: map[string]any{}}
	r.DoorSamples = []*Sample{
		// repetition 0: MCP twice REST's CPU, 1.5× its allocations
		window("doors", "rest", 64, 0, 1000, 5, 9, 0.10, 100),
		window("doors", "mcp", 64, 0, 1000, 7, 12, 0.20, 150),
		window("doors", "rest", 64, 0, 1000, 5, 9, 0.10, 100),
		window("doors", "mcp", 64, 0, 1000, 7, 12, 0.20, 150),
		// repetition 1: 1.5× CPU; a failed window does not count
		window("doors", "rest", 64, 1, 2000, 5, 9, 0.10, 100),
		window("doors", "mcp", 64, 1, 1000, 7, 12, 0.15, 150),
		{Result: window("doors", "mcp", 64, 1, 1000, 7, 12, 9, 9).Result, Rep: 1, Protocol: "doors", Failed: "boom"},
	}
	r.summarizeDoors()
	if len(r.Doors) != 2 {
		t.Fatalf("%d rows", len(r.Doors))
	}
	mcp := r.Doors[1]
	if mcp.Door != "mcp" || !slices.Equal(mcp.CPURatios, []float64{2, 1.5}) || *mcp.CPUvsREST != 1.75 || *mcp.MallocsVsREST != 1.5 {
		t.Fatalf("mcp row %+v (cpu %v)", mcp, mcp.CPURatios)
	}
	if r.Ratios["cpu_mcp_vs_rest_interleaved"] != any(1.75) || r.Doors[0].CPUvsREST != nil {
		t.Fatalf("ratios %v, rest row %+v", r.Ratios, r.Doors[0])
	}
	var b strings.Builder
	r.doorsMarkdown(&b)
	if !strings.Contains(b.String(), "| mcp | 0.175 | 1.75 (2.00, 1.50) |") {
		t.Fatalf("markdown:\n%s", b.String())
	}
}
