package registry

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"gopkg.in/yaml.v3"
)

// bigYAML is a registry file of n tools over n/100+1 services, each tool
// with two arguments and a config value, in the block style people write.
func bigYAML(n int) []byte {
	var sb strings.Builder
	svcs := n/100 + 1
	sb.WriteString("tool-service:\n")
	for i := range svcs {
		fmt.Fprintf(&sb, "  svc-%d:\n    id: svc-%d\n    topic: svc-%d-request\n    config-params:\n      - {name: collection, required: true}\n    timeout: 30s\n", i, i, i)
	}
	sb.WriteString("tool:\n")
	for i := range n {
		fmt.Fprintf(&sb, "  tool-%d:\n    type: tool-service\n    name: tool-%d\n    description: Tool number %d asks its service a question\n    service: svc-%d\n    collection: c%d\n    arguments:\n      - {name: question, type: string, description: The question}\n      - {name: limit, type: integer}\n", i, i, i, i%svcs, i)
	}
	return []byte(sb.String())
}

// BenchmarkParseLargeYAML parses registry files of 1,000 to 100,000 tools
// (100,000 tools: 28 MB). ns/op divided by tools should stay flat: the time
// is linear in the size.
func BenchmarkParseLargeYAML(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		data := bigYAML(n)
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			cpu0 := cpu()
			for b.Loop() {
				s, err := Parse("big.yaml", data, nil)
				if err != nil || len(s.Tools()) != n {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/tool")
			b.ReportMetric(float64(cpu()-cpu0)/float64(b.N*n), "cpu-ns/tool")
		})
	}
}

// cpu is the process's CPU time (user and system) in nanoseconds: on a
// busy machine it says more than the wall clock.
func cpu() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkYAMLv3Map decodes the same files with yaml.v3 into an `any`, as
// the registry did before: its duplicate-key check is quadratic in the
// number of keys of a mapping.
func BenchmarkYAMLv3Map(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		data := bigYAML(n)
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			cpu0 := cpu()
			for b.Loop() {
				var y any
				if err := yaml.Unmarshal(data, &y); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/tool")
			b.ReportMetric(float64(cpu()-cpu0)/float64(b.N*n), "cpu-ns/tool")
		})
	}
}
