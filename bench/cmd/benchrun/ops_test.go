package main

import (
	"strings"
	"testing"
)

func TestSummarizeOps(t *testing.T) {
	r := &Report{Config: Config{OpsConcurrency: 16, OpsWindows: 2, DurationS: 10}, Ratios: map[string]any{}}
	r.OpsSamples = []*Sample{
		// repetition 0: an operation 4 ms to the invoke's 2 (×2), CPU ×3
		window("operations", "rest", 16, 0, 1000, 2, 5, 0.1, 100),
		window("operations", "operation", 16, 0, 500, 4, 9, 0.3, 300),
		// repetition 1: ×1.5 and ×2
		window("operations", "rest", 16, 1, 1000, 2, 5, 0.1, 100),
		window("operations", "operation", 16, 1, 500, 3, 9, 0.2, 300),
	}
	r.OpsBus = []OpsBus{
		{Rep: 0, Calls: 100, Msgs: []int64{200, 100, 0}, Bytes: []int64{40000, 15000, 0}},
		{Rep: 1, Calls: 200, Msgs: []int64{400, 200, 0}, Bytes: []int64{80000, 30000, 0}},
		{Rep: 1, Calls: 0, Msgs: []int64{9, 9, 9}, Bytes: []int64{9, 9, 9}}, // no operations: left out
	}
	r.summarizeOps()
	o := r.Ops
	if o == nil {
		t.Fatal("no summary")
	}
	if *o.P50Ratio != 1.75 || *o.CPURatio != 2.5 || o.AddedP50MS != 1.5 {
		t.Fatalf("p50 × %v, CPU × %v, added %v ms; want 1.75, 2.5, 1.5", *o.P50Ratio, *o.CPURatio, o.AddedP50MS)
	}
	if o.MsgsPerOp[0] != 2 || o.MsgsPerOp[1] != 1 || o.BytesPerOp[0] != 400 || o.BytesPerOp[2] != 0 {
		t.Fatalf("per operation: msgs %v, bytes %v", o.MsgsPerOp, o.BytesPerOp)
	}
	if r.Ratios["operation_p50_added_ms_c16"] != any(1.5) || r.Ratios["operation_cpu_vs_invoke"] != any(2.5) {
		t.Fatalf("ratios %v", r.Ratios)
	}
	var b strings.Builder
	r.opsMarkdown(&b)
	for _, want := range []string{"**1.50 ms** (× 1.75)", "| `persistent://tg/operations/state` | 2.00 | 400 |"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}
