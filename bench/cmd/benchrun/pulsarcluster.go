package main

// Starting, stopping and steering the cluster of scripts/pulsar-cluster.sh
// for the cluster point (cluster.go): the script's commands, topic lookups
// and bundle unloads through the brokers' admin API.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
)

// pulsarCluster is the cluster of scripts/pulsar-cluster.sh that the
// point runs on: its ports, and whether benchrun started it (and so
// stops it).
type pulsarCluster struct {
	brokertest.Cluster
	repo    string
	data    string // its data folder, when benchrun started it
	started bool
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
	return &pulsarCluster{repo: repo, Cluster: brokertest.Cluster{ZK: ports[0], Bookie: ports[1],
		BrokerPorts: [2]int{ports[2], ports[4]}, WebPorts: [2]int{ports[3], ports[5]}}}, nil
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
	env := append(os.Environ(), c.Env()...)
	if c.data != "" {
		env = append(env, "PULSAR_CLUSTER_DATA_DIR="+c.data)
	}
	return env
}

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
		logf("cluster: using the one already running on %s (left running)", c.ServiceURL(0))
		return nil
	}
	data, err := os.MkdirTemp("", "toolgate-bench-cluster-")
	if err != nil {
		return err
	}
	c.data, c.started = data, true
	logf("cluster: starting ZooKeeper :%d, bookie :%d, brokers %s (admin :%d, :%d)", c.ZK, c.Bookie, c.ServiceURL(0), c.WebPorts[0], c.WebPorts[1])
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
		logf("cluster: its logs are %s/cluster-*-%d.log", dir, c.ZK)
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("cluster-*-%d.log*", c.ZK)))
	files = append(files, filepath.Join(dir, fmt.Sprintf(".lock-cluster-%d", c.ZK)))
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
