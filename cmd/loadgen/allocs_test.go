package main

import (
	"bufio"
	"strings"
	"testing"
)

func TestParseMallocs(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       int64
		ok         bool
	}{
		{"prometheus", "# HELP go_memstats_mallocs_total Total.\n# TYPE go_memstats_mallocs_total counter\ngo_memstats_mallocs_total 1.234567e+06\ngo_memstats_mallocs_total_other 1\n", 1234567, true},
		{"plain", "go_goroutines 3\ngo_memstats_mallocs_total 42\n", 42, true},
		{"absent", "go_goroutines 3\ngo_memstats_frees_total 40\n", 0, false},
		{"garbage", "go_memstats_mallocs_total many\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMallocs(bufio.NewScanner(strings.NewReader(tc.text)), "test")
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("got %d, %v; want %d (ok %v)", got, err, tc.want, tc.ok)
			}
		})
	}
}
