// Package cluster runs gateways and tool services on a real Pulsar
// cluster (ZooKeeper, one bookie, two brokers; scripts/pulsar-cluster.sh)
// and moves and kills brokers under them: topics unloaded to the other
// broker, the broker owning them SIGKILLed. The cluster is its own, on
// ports chosen when the test starts, so that it meets neither the
// standalone broker of the other packages nor a concurrent run.
package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pulsar-client-go v0.19: a closed producer's send-timeout goroutine
		// only notices the close when its timer next fires.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
	)
}

// pulsarCluster is the cluster of one test: its ports, and how to reach
// and steer it.
type pulsarCluster struct {
	brokertest.Cluster
}

// startCluster runs scripts/pulsar-cluster.sh up on free ports and stops
// the cluster when the test ends.
func startCluster(t *testing.T) *pulsarCluster {
	t.Helper()
	p := brokertest.FreePorts(t, 6)
	c := &pulsarCluster{brokertest.Cluster{ZK: p[0], Bookie: p[1], BrokerPorts: [2]int{p[2], p[3]}, WebPorts: [2]int{p[4], p[5]}}}
	data := t.TempDir()
	t.Cleanup(func() {
		c.script(t, "down")
		c.removeFiles(t)
	})
	start := time.Now()
	out := c.script(t, "up", "PULSAR_CLUSTER_DATA_DIR="+data)
	t.Logf("cluster up in %s:\n%s", time.Since(start).Round(time.Second), out)
	return c
}

func (c *pulsarCluster) env() []string { return append(os.Environ(), c.Env()...) }

// script runs scripts/pulsar-cluster.sh with the cluster's ports (and
// extra environment), failing the test when it fails.
func (c *pulsarCluster) script(t *testing.T, args ...string) string {
	t.Helper()
	verb, extra := args[0], args[1:]
	var argv []string
	for _, a := range extra {
		if !strings.Contains(a, "=") {
			argv = append(argv, a)
		}
	}
	cmd := exec.Command("scripts/pulsar-cluster.sh", append([]string{verb}, argv...)...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = c.env()
	for _, a := range extra {
		if strings.Contains(a, "=") {
			cmd.Env = append(cmd.Env, a)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/pulsar-cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kill SIGKILLs broker i (0 or 1).
func (c *pulsarCluster) kill(t *testing.T, i int) {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(c.script(t, "pid", fmt.Sprintf("broker%d", i+1))))
	if err != nil {
		t.Fatalf("pid of broker%d: %v", i+1, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL broker%d (pid %d): %v", i+1, pid, err)
	}
}

// removeFiles deletes what the script keeps per cluster in the cache
// (logs, lock), once the test passed: every run has new ports.
func (c *pulsarCluster) removeFiles(t *testing.T) {
	cache := os.Getenv("TOOLGATE_CACHE") // as the script sees it, from the repository's root
	if cache == "" {
		cache = ".cache"
	}
	if !filepath.IsAbs(cache) {
		cache = filepath.Join("..", "..", cache)
	}
	dir := filepath.Join(cache, "pulsar")
	if t.Failed() {
		t.Logf("cluster logs: %s/cluster-*-%d.log", dir, c.ZK)
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("cluster-*-%d.log*", c.ZK)))
	files = append(files, filepath.Join(dir, fmt.Sprintf(".lock-cluster-%d", c.ZK)))
	for _, f := range files {
		_ = os.Remove(f)
	}
}

// place moves namespace ns (the bundle of topic) to broker dst and waits
// until a lookup of topic names dst: an unload with a destination is a
// hint the load manager may miss when a lookup races it, so it is tried
// again until the topic is there.
func (c *pulsarCluster) place(t *testing.T, ns, topic string, dst int) {
	t.Helper()
	if err := c.Place(t.Context(), ns, topic, dst); err != nil {
		t.Fatal(err)
	}
}
