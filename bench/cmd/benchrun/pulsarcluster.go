package main

// Starting, stopping and steering the cluster of scripts/pulsar-cluster.sh
// for the cluster point (cluster.go): the script's commands, topic lookups
// and bundle unloads through the brokers' admin API.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pulsarCluster is the cluster of scripts/pulsar-cluster.sh that the
// point runs on: its ports, and whether benchrun started it (and so
// stops it).
type pulsarCluster struct {
	repo        string
	zk, bookie  int
	brokerPorts [2]int
	webPorts    [2]int
	data        string // its data folder, when benchrun started it
	started     bool
}

// clusterPortVars are the script's port variables, in newCluster's order.
var clusterPortVars = []string{"PULSAR_CLUSTER_ZK_PORT", "PULSAR_CLUSTER_BOOKIE_PORT",
	"PULSAR_CLUSTER_BROKER1_PORT", "PULSAR_CLUSTER_WEB1_PORT", "PULSAR_CLUSTER_BROKER2_PORT", "PULSAR_CLUSTER_WEB2_PORT"}

// newCluster takes the ports from the script's variables where they are
// set and picks free ones for the others.
func newCluster(repo string) (*pulsarCluster, error) {
	ports := make([]int, len(clusterPortVars))
	for i, v := range clusterPortVars {
		s := os.Getenv(v)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%s=%q is not a port", v, s)
		}
		ports[i] = n
	}
	for i := range ports {
		if ports[i] != 0 {
			continue
		}
		p, err := freeLowPort(ports)
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return &pulsarCluster{repo: repo, zk: ports[0], bookie: ports[1],
		brokerPorts: [2]int{ports[2], ports[4]}, webPorts: [2]int{ports[3], ports[5]}}, nil
}

// freeLowPort picks a port nothing listens on between 20000 and 32000:
// below the kernel's ephemeral range, so that no outgoing connection takes
// it before the cluster binds it.
func freeLowPort(taken []int) (int, error) {
	for range 1000 {
		p := 20000 + rand.IntN(12000)
		if slices.Contains(taken, p) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p, nil
	}
	return 0, errors.New("no free port found between 20000 and 32000")
}

func (c *pulsarCluster) env() []string {
	env := os.Environ()
	for i, p := range []int{c.zk, c.bookie, c.brokerPorts[0], c.webPorts[0], c.brokerPorts[1], c.webPorts[1]} {
		env = append(env, clusterPortVars[i]+"="+strconv.Itoa(p))
	}
	if c.data != "" {
		env = append(env, "PULSAR_CLUSTER_DATA_DIR="+c.data)
	}
	return env
}

// serviceURL names both brokers, broker first first.
func (c *pulsarCluster) serviceURL(first int) string {
	return fmt.Sprintf("pulsar://127.0.0.1:%d,127.0.0.1:%d", c.brokerPorts[first], c.brokerPorts[1-first])
}

func (c *pulsarCluster) brokerURL(i int) string {
	return fmt.Sprintf("pulsar://127.0.0.1:%d", c.brokerPorts[i])
}

func (c *pulsarCluster) admin(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", c.webPorts[i]) }

// brokerID is how the load manager names broker i (unload's
// destinationBroker).
func (c *pulsarCluster) brokerID(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.webPorts[i]) }

// script runs scripts/pulsar-cluster.sh in its own process group, so that
// a Ctrl-C at the terminal reaches benchrun only, which then stops it
// (SIGTERM to the group) and runs down.
func (c *pulsarCluster) script(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.repo, "scripts", "pulsar-cluster.sh"), args...)
	cmd.Dir, cmd.Env = c.repo, c.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("scripts/pulsar-cluster.sh %s: %w\n%s", strings.Join(args, " "), err, lastLines(string(out), 15))
	}
	return string(out), nil
}

// start brings the cluster up, or uses the one already running on these
// ports (which is then left running).
func (c *pulsarCluster) start(ctx context.Context) error {
	if _, err := c.script(ctx, "status"); err == nil {
		logf("cluster: using the one already running on %s (left running)", c.serviceURL(0))
		return nil
	}
	data, err := os.MkdirTemp("", "toolgate-bench-cluster-")
	if err != nil {
		return err
	}
	c.data, c.started = data, true
	logf("cluster: starting ZooKeeper :%d, bookie :%d, brokers %s (admin :%d, :%d)", c.zk, c.bookie, c.serviceURL(0), c.webPorts[0], c.webPorts[1])
	t0 := time.Now()
	if _, err := c.script(ctx, "up"); err != nil {
		return err
	}
	logf("cluster: up in %s", time.Since(t0).Round(time.Second))
	return nil
}

// stop runs down when benchrun started the cluster and removes its data;
// its logs (and lock file) in the cache too unless keepLogs.
func (c *pulsarCluster) stop(keepLogs bool) {
	if !c.started {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.script(ctx, "down"); err != nil {
		logf("cluster: %v", err)
		keepLogs = true
	} else {
		logf("cluster: stopped")
	}
	_ = os.RemoveAll(c.data)
	cache := os.Getenv("TOOLGATE_CACHE")
	if cache == "" {
		cache = ".cache"
	}
	if !filepath.IsAbs(cache) {
		cache = filepath.Join(c.repo, cache)
	}
	dir := filepath.Join(cache, "pulsar")
	if keepLogs {
		logf("cluster: its logs are %s/cluster-*-%d.log", dir, c.zk)
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("cluster-*-%d.log*", c.zk)))
	files = append(files, filepath.Join(dir, fmt.Sprintf(".lock-cluster-%d", c.zk)))
	for _, f := range files {
		_ = os.Remove(f)
	}
}

// pid is the process id of broker i (0 or 1).
func (c *pulsarCluster) pid(i int) (int, error) {
	out, err := c.script(context.Background(), "pid", fmt.Sprintf("broker%d", i+1))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return 0, fmt.Errorf("pid of broker%d: %q", i+1, out)
	}
	return pid, nil
}

// clusterHTTP follows the brokers' redirects to a topic's or bundle's
// owner.
var clusterHTTP = &http.Client{Timeout: 10 * time.Second}

// owner is the broker (0 or 1) that owns topic, by a lookup at the first
// broker that answers (which assigns an owner when the bundle has none).
func (c *pulsarCluster) owner(topic string) (int, error) {
	scheme, rest, _ := strings.Cut(topic, "://")
	var last error
	for i := range 2 {
		resp, err := clusterHTTP.Get(c.admin(i) + "/lookup/v2/topic/" + scheme + "/" + rest)
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

// place moves namespace ns, whose topic is topic, to broker dst: it
// unloads the namespace's one bundle with dst as destination until a
// lookup of topic names dst (the destination is a hint that a lookup
// racing the unload can beat).
func (c *pulsarCluster) place(ctx context.Context, ns, topic string, dst int) error {
	var last error
	for range 20 {
		o, err := c.owner(topic)
		if err == nil && o == dst {
			return nil
		}
		if err == nil {
			err = c.unload(ns, dst)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not move to broker%d: %w", ns, dst+1, last)
}

// unload unloads the (single) bundle of ns to broker dst.
func (c *pulsarCluster) unload(ns string, dst int) error {
	req, err := http.NewRequest(http.MethodPut, c.admin(dst)+"/admin/v2/namespaces/"+ns+"/0x00000000_0xffffffff/unload?destinationBroker="+c.brokerID(dst), nil)
	if err != nil {
		return err
	}
	resp, err := clusterHTTP.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("unload %s to broker%d: %s", ns, dst+1, resp.Status)
	}
	return nil
}
