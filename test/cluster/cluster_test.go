// Package cluster runs gateways and tool services on a real Pulsar
// cluster (ZooKeeper, one bookie, two brokers; scripts/pulsar-cluster.sh)
// and moves and kills brokers under them: topics unloaded to the other
// broker, the broker owning them SIGKILLed. The cluster is its own, on
// ports chosen when the test starts, so that it meets neither the
// standalone broker of the other packages nor a concurrent run.
package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
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
	zk, bookie  int
	brokerPorts [2]int // binary protocol
	webPorts    [2]int // admin (HTTP)
}

// brokerURL is broker i's own service URL.
func (c *pulsarCluster) brokerURL(i int) string {
	return fmt.Sprintf("pulsar://127.0.0.1:%d", c.brokerPorts[i])
}

// serviceURL names both brokers, broker first: a client looks topics up
// at either (pulsar-client-go starts at a random one of the list and goes
// round it), so it can still find the topics' new owner when one broker is
// gone (a URL with only the dead broker never could).
func (c *pulsarCluster) serviceURL(first int) string {
	return fmt.Sprintf("pulsar://127.0.0.1:%d,127.0.0.1:%d", c.brokerPorts[first], c.brokerPorts[1-first])
}

func (c *pulsarCluster) admin(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", c.webPorts[i]) }

// brokerID is how the load manager names broker i (unload's destinationBroker).
func (c *pulsarCluster) brokerID(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.webPorts[i]) }

// startCluster runs scripts/pulsar-cluster.sh up on free ports and stops
// the cluster when the test ends.
func startCluster(t *testing.T) *pulsarCluster {
	t.Helper()
	p := brokertest.FreePorts(t, 6)
	c := &pulsarCluster{zk: p[0], bookie: p[1], brokerPorts: [2]int{p[2], p[3]}, webPorts: [2]int{p[4], p[5]}}
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

func (c *pulsarCluster) env() []string {
	return append(os.Environ(),
		"PULSAR_CLUSTER_ZK_PORT="+strconv.Itoa(c.zk),
		"PULSAR_CLUSTER_BOOKIE_PORT="+strconv.Itoa(c.bookie),
		"PULSAR_CLUSTER_BROKER1_PORT="+strconv.Itoa(c.brokerPorts[0]),
		"PULSAR_CLUSTER_BROKER2_PORT="+strconv.Itoa(c.brokerPorts[1]),
		"PULSAR_CLUSTER_WEB1_PORT="+strconv.Itoa(c.webPorts[0]),
		"PULSAR_CLUSTER_WEB2_PORT="+strconv.Itoa(c.webPorts[1]),
	)
}

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
		t.Logf("cluster logs: %s/cluster-*-%d.log", dir, c.zk)
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("cluster-*-%d.log*", c.zk)))
	files = append(files, filepath.Join(dir, fmt.Sprintf(".lock-cluster-%d", c.zk)))
	for _, f := range files {
		_ = os.Remove(f)
	}
}

// adminClient follows the brokers' redirects to a topic's owner and keeps
// no idle connections (goleak).
var adminClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// owner returns which broker (0 or 1) owns topic, by a lookup at any
// broker that answers (assigning an owner when the bundle has none).
func (c *pulsarCluster) owner(topic string) (int, error) {
	scheme, rest, _ := strings.Cut(topic, "://")
	var last error
	for i := range 2 {
		resp, err := adminClient.Get(c.admin(i) + "/lookup/v2/topic/" + scheme + "/" + rest)
		if err != nil {
			last = err
			continue
		}
		var r struct {
			BrokerURL string `json:"brokerUrl"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("lookup of %s at broker%d: %s", topic, i+1, resp.Status)
			continue
		}
		if err != nil {
			last = fmt.Errorf("lookup of %s at broker%d: %w", topic, i+1, err)
			continue
		}
		for j := range 2 {
			if r.BrokerURL == c.brokerURL(j) {
				return j, nil
			}
		}
		return -1, fmt.Errorf("lookup of %s: owner %q is neither broker", topic, r.BrokerURL)
	}
	return -1, last
}

// moveNamespace unloads the (single) bundle of namespace ns to broker
// dst, through broker via's admin API: its topics move there.
func (c *pulsarCluster) moveNamespace(ns string, via, dst int) error {
	req, _ := http.NewRequest(http.MethodPut, c.admin(via)+"/admin/v2/namespaces/"+ns+"/0x00000000_0xffffffff/unload?destinationBroker="+c.brokerID(dst), nil)
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("unload %s to broker%d: %s", ns, dst+1, resp.Status)
	}
	return nil
}

// place moves namespace ns (the bundle of topic) to broker dst and waits
// until a lookup of topic names dst: an unload with a destination is a
// hint the load manager may miss when a lookup races it, so it is tried
// again until the topic is there.
func (c *pulsarCluster) place(t *testing.T, ns, topic string, dst int) {
	t.Helper()
	var last error
	for range 20 {
		o, err := c.owner(topic)
		if err == nil && o == dst {
			return
		}
		if err == nil {
			err = c.moveNamespace(ns, dst, dst)
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s did not move to broker%d: %v", ns, dst+1, last)
}

// consumers counts the consumers the owner of topic reports on it.
func (c *pulsarCluster) consumers(topic string) int {
	scheme, rest, _ := strings.Cut(topic, "://")
	for i := range 2 {
		resp, err := adminClient.Get(c.admin(i) + "/admin/v2/" + scheme + "/" + rest + "/stats")
		if err != nil {
			continue
		}
		var st struct {
			Subscriptions map[string]struct {
				Consumers []json.RawMessage `json:"consumers"`
			} `json:"subscriptions"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			continue
		}
		n := 0
		for _, s := range st.Subscriptions {
			n += len(s.Consumers)
		}
		return n
	}
	return 0
}
