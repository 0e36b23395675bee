package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPercentileMs(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := percentileMs(ds, tc.q); got != tc.want {
			t.Errorf("percentileMs(1..100 ms, %v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := percentileMs(nil, 0.5); got != 0 {
		t.Errorf("percentileMs(nil) = %v, want 0", got)
	}
	if got := percentileMs([]time.Duration{1234567 * time.Nanosecond}, 0.99); got != 1.23 {
		t.Errorf("percentileMs(1.234567 ms) = %v, want 1.23", got)
	}
}

func TestNamespaceOf(t *testing.T) {
	for topic, want := range map[string]string{
		"non-persistent://tg/request/echo":           "tg/request",
		"non-persistent://tg/response/toolgate.gw-1": "tg/response",
		"persistent://tg/config/tool-descriptors":    "tg/config",
		"nonsense": "",
	} {
		if got := namespaceOf(topic); got != want {
			t.Errorf("namespaceOf(%q) = %q, want %q", topic, got, want)
		}
	}
}

func TestOwnersText(t *testing.T) {
	owners := []ClusterOwner{
		{Role: "request", Broker: 1}, {Role: "response", Broker: 2}, {Role: "reply", Broker: 2},
		{Role: "reply", Broker: 2}, {Role: "announcements", Broker: 1},
	}
	if got, want := ownersText(owners), "b1: request, announcements; b2: response, reply ×2"; got != want {
		t.Errorf("ownersText = %q, want %q", got, want)
	}
	for i := range owners {
		owners[i].Broker = 1
	}
	if got, want := ownersText(owners), "b1: request, response, reply ×2, announcements"; got != want {
		t.Errorf("ownersText = %q, want %q", got, want)
	}
}

func TestClusterMarkdown(t *testing.T) {
	one := []ClusterOwner{{Role: "request", Broker: 1}, {Role: "response", Broker: 1}}
	spread := []ClusterOwner{{Role: "request", Broker: 1}, {Role: "response", Broker: 2}}
	r := ScaleReport{Date: "d", Cluster: &ClusterReport{Date: "d", ServiceURL: "pulsar://127.0.0.1:1,127.0.0.1:2",
		Replicas: 2, Services: 2, Concurrency: 64, ReplyTo: true, MsgSize: 32, WarmupS: 2, DurationS: 10,
		Points: []ClusterPoint{
			{Round: 1, Layout: "one-broker", Owners: one, Calls: 1000, RPS: 100, P50Ms: 10, P99Ms: 30, GatewayCPUMsPerCall: 0.1, BrokerCPUMsPerCall: [2]float64{0.05, 0.002}},
			{Round: 1, Layout: "spread", Owners: spread, Calls: 800, RPS: 80, P50Ms: 13.5, P99Ms: 50, GatewayCPUMsPerCall: 0.12, BrokerCPUMsPerCall: [2]float64{0.035, 0.045}, Errors: 2},
			{Round: 2, Layout: "spread", Failed: "the owner of x changed during the window\nmore"},
			{Round: 2, Layout: "one-broker", Owners: one, Calls: 3000, RPS: 300, P50Ms: 6, P99Ms: 20, GatewayCPUMsPerCall: 0.2, BrokerCPUMsPerCall: [2]float64{0.07, 0.002}},
		}}}
	md := r.markdown()
	for _, want := range []string{
		"The replica points were not run.",
		"## Two brokers: topics on one broker or spread (d)",
		"`pulsar://127.0.0.1:1,127.0.0.1:2`",
		"| 1 | one-broker | b1: request, response | 100 | 10.00 | 30.00 | 0.100 | 0.050 | 0.002 | 0.052 | 0 |",
		"| 1 | spread | b1: request; b2: response | 80 | 13.50 | 50.00 | 0.120 | 0.035 | 0.045 | 0.080 | 2 |",
		"| 2 | spread | failed: the owner of x changed during the window | | | | | | | | |",
		// one-broker over its two windows: rates and percentiles averaged,
		// CPU per call weighted by calls (1000 and 3000).
		"| mean | one-broker | | 200 | 8.00 | 25.00 | 0.175 | 0.065 | 0.002 | 0.067 | 0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("scale.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| mean | spread |") {
		t.Errorf("a mean row for spread, which has one window measured:\n%s", md)
	}

	r.Cluster = &ClusterReport{Date: "d", Failed: "scripts/pulsar-cluster.sh up: exit status 1\nlog"}
	if md := r.markdown(); !strings.Contains(md, "Not measured: scripts/pulsar-cluster.sh up: exit status 1\n") {
		t.Errorf("scale.md of a cluster that did not start:\n%s", md)
	}
}

func TestNewClusterPorts(t *testing.T) {
	for _, v := range clusterPortVars {
		t.Setenv(v, "")
	}
	t.Setenv("PULSAR_CLUSTER_BROKER2_PORT", "26651")
	c, err := newCluster("/repo")
	if err != nil {
		t.Fatal(err)
	}
	ports := []int{c.ZK, c.Bookie, c.BrokerPorts[0], c.WebPorts[0], c.BrokerPorts[1], c.WebPorts[1]}
	if c.BrokerPorts[1] != 26651 {
		t.Errorf("broker 2's port %d, want 26651 from PULSAR_CLUSTER_BROKER2_PORT", c.BrokerPorts[1])
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < 20000 || p >= 32768 || seen[p] {
			t.Errorf("ports %v: want distinct ports below the ephemeral range", ports)
			break
		}
		seen[p] = true
	}
	if got, want := c.ServiceURL(1), "pulsar://127.0.0.1:26651,127.0.0.1:"+strconv.Itoa(c.BrokerPorts[0]); got != want {
		t.Errorf("serviceURL(1) = %q, want %q", got, want)
	}
	t.Setenv("PULSAR_CLUSTER_ZK_PORT", "zk")
	if _, err := newCluster("/repo"); err == nil || !strings.Contains(err.Error(), "PULSAR_CLUSTER_ZK_PORT") {
		t.Errorf("newCluster with PULSAR_CLUSTER_ZK_PORT=zk: %v, want an error naming it", err)
	}
}
