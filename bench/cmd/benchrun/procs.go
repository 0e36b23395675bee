package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a long-running process benchrun started (gateway, echo service).
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	// Servers (gateway, gatewayprof, floorgw): where they listen.
	grpcAddr, httpAddr, pprofAddr string
	// metricsAddr serves its /metrics: a gateway's admin listener,
	// floorgw's HTTP listener.
	metricsAddr string
}

var (
	childrenMu sync.Mutex
	children   = map[*child]bool{}
)

// startChild starts bin with args, its output going to logDir/name.log.
func startChild(logDir, name, bin string, args ...string) (*child, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	childrenMu.Lock()
	children[c] = true
	childrenMu.Unlock()
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after grace.
func (c *child) stop(grace time.Duration) {
	childrenMu.Lock()
	delete(children, c)
	childrenMu.Unlock()
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// stopAll stops every child still running (on exit or interrupt).
func stopAll() {
	childrenMu.Lock()
	var cs []*child
	for c := range children {
		cs = append(cs, c)
	}
	childrenMu.Unlock()
	for _, c := range cs {
		c.stop(10 * time.Second)
	}
}

// tail is the end of a child's log, for error messages.
func (c *child) tail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitLog waits until the child's log holds substr.
func (c *child) waitLog(ctx context.Context, substr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(c.log)
		if bytes.Contains(b, []byte(substr)) {
			return nil
		}
		if c.exited() {
			return fmt.Errorf("%s exited (%w):\n%s", c.name, c.err, c.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %q in its log after %s:\n%s", c.name, substr, timeout, c.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitReady polls the server's /readyz until it answers 200 and then
// checks that the process answering is this child: every address it was
// given must be a socket listening in this child (by the socket's inode in
// /proc/net/tcp and the child's /proc/<pid>/fd), so that another process
// that happens to hold the port is never benchmarked in its place.
func (c *child) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get("http://" + c.httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if c.exited() {
			return fmt.Errorf("%s exited (%w):\n%s", c.name, c.err, c.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s:\n%s", c.name, timeout, c.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, addr := range []string{c.httpAddr, c.grpcAddr, c.pprofAddr} {
		if addr == "" {
			continue
		}
		owner, err := listenerPID(addr, c.pid())
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if owner != c.pid() {
			return fmt.Errorf("%s (pid %d) is not the process listening on %s: pid %d (%s) is; refusing to benchmark it", c.name, c.pid(), addr, owner, cmdline(owner))
		}
	}
	return nil
}

// freeAddr returns 127.0.0.1:<a port free right now>. Another process may
// take it before the server does; waitReady then notices.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// listenerPID returns the process holding the socket that listens on addr
// (127.0.0.1:port or [::]:port alike: any local address with that port).
// It looks in the process "first" before all others. 0 when the socket
// is found but no process we may inspect owns it.
func listenerPID(addr string, first int) (int, error) {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port of %s: %w", addr, err)
	}
	inodes := listeningInodes(port)
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing listens on %s (per /proc/net/tcp)", addr)
	}
	if first > 0 && ownsSocket(first, inodes) {
		return first, nil
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == first {
			continue
		}
		if ownsSocket(pid, inodes) {
			return pid, nil
		}
	}
	return 0, nil
}

// listeningInodes are the inodes of the TCP sockets in state LISTEN on
// port, from /proc/net/tcp and /proc/net/tcp6.
func listeningInodes(port uint64) map[string]bool {
	out := map[string]bool{}
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" || !strings.HasSuffix(fs[1], want) {
				continue
			}
			out[fs[9]] = true
		}
	}
	return out
}

// ownsSocket reports whether one of pid's file descriptors is a socket
// with one of inodes.
func ownsSocket(pid int, inodes map[string]bool) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue
		}
		if ino, ok := strings.CutPrefix(target, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
			return true
		}
	}
	return false
}

func cmdline(pid int) string {
	if pid == 0 {
		return "not visible to this user"
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "?"
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// runJSON runs a load client to completion and decodes the last line of its
// stdout into v.
func runJSON(ctx context.Context, timeout time.Duration, v any, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" || last[0] != '{' {
		if runErr == nil {
			runErr = errors.New("no JSON result on stdout")
		}
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), runErr, lastLines(stderr.String(), 15))
	}
	if err := json.Unmarshal([]byte(last), v); err != nil {
		return fmt.Errorf("%s: result: %w", filepath.Base(bin), err)
	}
	if runErr != nil {
		// A result was printed; report the exit status but keep it.
		fmt.Fprintf(os.Stderr, "benchrun: %s exited with %v after printing its result\n", filepath.Base(bin), runErr)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// brokerPID finds the Pulsar broker's process: the one holding the socket
// that listens on the broker URL's port, when it is a local broker, else
// the pid file scripts/pulsar.sh writes for the admin URL's web port
// (pulsar.pid on 8080, pulsar-<port>.pid on others). 0 when unknown (its
// CPU is then not reported).
func brokerPID(repo, pulsarURL, adminURL string) int {
	isBroker := func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return err == nil && bytes.Contains(b, []byte("PulsarStandaloneStarter"))
	}
	if u, err := url.Parse(pulsarURL); err == nil && isLocal(u.Hostname()) && u.Port() != "" {
		if pid, err := listenerPID(net.JoinHostPort(u.Hostname(), u.Port()), 0); err == nil && pid != 0 && isBroker(pid) {
			return pid
		}
	}
	cache := os.Getenv("TOOLGATE_CACHE")
	if cache == "" {
		cache = filepath.Join(repo, ".cache")
	}
	name := "pulsar.pid"
	if u, err := url.Parse(adminURL); err == nil && u.Port() != "" && u.Port() != "8080" {
		name = "pulsar-" + u.Port() + ".pid"
	}
	if b, err := os.ReadFile(filepath.Join(cache, "pulsar", name)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && isBroker(pid) {
			return pid
		}
	}
	return 0
}

func isLocal(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// topicSnap is a non-persistent topic's message counters.
type topicSnap struct {
	in  int64
	out map[string]int64 // by subscription
}

// snapTopic reads the counters of tg/<namespace>/<topic>; nil when the admin
// API does not answer.
func snapTopic(adminURL, namespace, topic string) *topicSnap {
	hc := http.Client{Timeout: 3 * time.Second}
	resp, err := hc.Get(adminURL + "/admin/v2/non-persistent/tg/" + namespace + "/" + topic + "/stats")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	var st struct {
		MsgInCounter  int64 `json:"msgInCounter"`
		Subscriptions map[string]struct {
			MsgOutCounter int64 `json:"msgOutCounter"`
		} `json:"subscriptions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil
	}
	s := &topicSnap{in: st.MsgInCounter, out: map[string]int64{}}
	for name, sub := range st.Subscriptions {
		s.out[name] = sub.MsgOutCounter
	}
	return s
}

// lostBetween is how many messages the broker took on the topic but did not
// deliver to its subscriptions (one subscription on the topic assumed;
// subscriptions created in between count from zero). -1 when unknown.
func lostBetween(before, after *topicSnap) int64 {
	if before == nil || after == nil || len(after.out) != 1 {
		return -1
	}
	var out int64
	for name, n := range after.out {
		out += n - before.out[name]
	}
	return after.in - before.in - out
}
