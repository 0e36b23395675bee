package main

import (
	"bufio"
	"strings"
	"testing"
)

func TestParseCounters(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       counters
		ok         bool
	}{
		{"prometheus", "# HELP go_memstats_mallocs_total Total.\n# TYPE go_memstats_mallocs_total counter\ngo_memstats_mallocs_total 1.234567e+06\ngo_memstats_mallocs_total_other 1\ngo_gc_duration_seconds_sum 0.5\ngo_gc_duration_seconds_count 17\n", counters{1234567, 17, -1, -1}, true},
		{"plain, no GC count", "go_goroutines 3\ngo_memstats_mallocs_total 42\n", counters{42, -1, -1, -1}, true},
		{"the gateway's publishes", "go_memstats_mallocs_total 42\ntoolgate_bridge_published_total 1000\ntoolgate_bridge_hedged_total 3\ntoolgate_bridge_published_totals 9\n", counters{42, -1, 1000, 3}, true},
		{"absent", "go_goroutines 3\ngo_memstats_frees_total 40\ngo_gc_duration_seconds_count 2\n", counters{}, false},
		{"garbage", "go_memstats_mallocs_total many\n", counters{}, false},
		{"garbage GC count", "go_memstats_mallocs_total 1\ngo_gc_duration_seconds_count -3\n", counters{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCounters(bufio.NewScanner(strings.NewReader(tc.text)), "test")
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v (ok %v)", got, err, tc.want, tc.ok)
			}
		})
	}
}
