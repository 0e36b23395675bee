package telemetry

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestInstanceInfo(t *testing.T) {
	m := NewMetrics(WithInstance("gw-7"), WithoutRuntimeMetrics())
	want := `
# HELP toolgate_instance_info Always 1; its instance label names this gateway replica (--instance-id).
# TYPE toolgate_instance_info gauge
toolgate_instance_info{instance="gw-7"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "toolgate_instance_info"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(NewMetrics(WithoutRuntimeMetrics()).Registry(), "toolgate_instance_info"); err != nil || n != 0 {
		t.Fatalf("without WithInstance: %d series, %v; want none", n, err)
	}
}
