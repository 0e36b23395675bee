package main

import (
	"strings"
	"testing"
)

func TestScaleMarkdown(t *testing.T) {
	r := ScaleReport{Date: "d", MsgSize: 32, WarmupS: 1, DurationS: 3, Points: []ScalePoint{
		{Replicas: 4, Loaded: 1, ReplyTo: false, RPS: 3000, GatewayCPUMsPerCall: 0.178, BystanderCPUMsPerCall: 0.0195, BrokerCPUMsPerCall: 0.05, ReplyDeliveriesPerCall: 4.02, ReplyBytesPerCall: 640},
		{Replicas: 2, Loaded: 2, ReplyTo: true, RPS: 4000, GatewayCPUMsPerCall: 0.16, BrokerCPUMsPerCall: 0.04, ReplyDeliveriesPerCall: 1.004, ReplyBytesPerCall: 163},
		{Replicas: 1, Loaded: 1, ReplyTo: true, Failed: "no call completed"},
	}}
	md := r.markdown()
	for _, want := range []string{
		"| 4 | 1 | false | 3000 | 0.178 | 0.0195 | 0.050 | 4.020 | 640 | 0 |",
		"| 2 | 2 | true | 4000 | 0.160 | – | 0.040 | 1.004 | 163 | 0 |",
		"| 1 | 1 | true | failed: no call completed |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("scale.md lacks %q:\n%s", want, md)
		}
	}
}
