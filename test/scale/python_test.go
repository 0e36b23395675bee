package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
)

// venv is the Python venv with TrustGraph's services: TOOLGATE_VENV if
// set, else what scripts/pyenv.sh prints (installing it on first use).
func venv(t *testing.T) string {
	t.Helper()
	v := os.Getenv("TOOLGATE_VENV")
	if v == "" {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "scripts", "pyenv.sh"))
		cmd.Dir = repoRoot(t)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("the Python venv with TrustGraph is required: scripts/pyenv.sh: %v\n%s", err, stderr.String())
		}
		v = strings.TrimSpace(stdout.String())
	}
	if _, err := os.Stat(filepath.Join(v, "bin", "joke-service")); err != nil {
		t.Fatalf("the Python venv with TrustGraph is required: %v (TOOLGATE_VENV=%q)", err, os.Getenv("TOOLGATE_VENV"))
	}
	return v
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// ensureNotifyNamespace creates tg/notify, which every TrustGraph
// processor needs before it gets to its own topics.
func ensureNotifyNamespace(t *testing.T) {
	t.Helper()
	admin := brokertest.AdminURL() + "/admin/v2/namespaces/tg"
	resp, err := http.Get(admin)
	if err != nil {
		t.Fatalf("list namespaces of tenant tg: %v", err)
	}
	var list []string
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("list namespaces of tenant tg: %v", err)
	}
	if slices.Contains(list, "tg/notify") {
		return
	}
	req, _ := http.NewRequest(http.MethodPut, admin+"/notify", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("create namespace tg/notify: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		t.Fatalf("create namespace tg/notify: HTTP %d", resp.StatusCode)
	}
}

// startPythonJokes runs TrustGraph's joke-service (from PyPI, unchanged)
// on topic until the test ends, and returns once it has subscribed.
func startPythonJokes(t *testing.T, topic string) { t.Helper(); startPythonJokesProc(t, topic) }

// pyProc is a running Python service: its process, and done, closed when
// it has exited.
type pyProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startPythonJokesProc is startPythonJokes, returning the process.
func startPythonJokesProc(t *testing.T, topic string) *pyProc {
	t.Helper()
	return startPythonJokesAs(t, topic, brokertest.UniqueTopic("toolgate-scale-pyjoke"))
}

// startPythonJokesAs is startPythonJokesProc with the service id given:
// its subscription is "<id>-request", which a Go SDK service of the same
// id shares.
func startPythonJokesAs(t *testing.T, topic, id string) *pyProc {
	t.Helper()
	v := venv(t)
	ensureNotifyNamespace(t)
	logPath := filepath.Join(t.TempDir(), "joke-service.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(v, "bin", "joke-service"), "-p", brokertest.PulsarURL(), "--id", id,
		"-t", topic, "--no-metrics", "--no-loki-enabled")
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1", "VIRTUAL_ENV="+v)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start joke-service: %v", err)
	}
	logFile.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	logTail := func() string {
		b, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		return strings.Join(lines[max(0, len(lines)-40):], "\n")
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("joke-service output, last lines:\n%s", logTail())
		}
	})
	requestTopic := "non-persistent://tg/request/" + topic
	if !eventually.Holds(45*time.Second, func() bool {
		select {
		case <-done:
			t.Fatalf("joke-service exited before subscribing to %s; output:\n%s", requestTopic, logTail())
		default:
		}
		return brokertest.Subscriptions(requestTopic) > 0 || consumersOf(t, requestTopic) > 0
	}) {
		t.Fatalf("joke-service did not subscribe to %s within 45s; output:\n%s", requestTopic, logTail())
	}
	return &pyProc{cmd: cmd, done: done}
}

// deliveries is the sum of msgOutCounter over a topic's subscriptions:
// the messages the broker delivered from it (0 when it does not exist).
func deliveries(t *testing.T, topic string) int64 {
	t.Helper()
	scheme, rest, _ := strings.Cut(topic, "://")
	resp, err := http.Get(brokertest.AdminURL() + "/admin/v2/" + scheme + "/" + rest + "/stats")
	if err != nil {
		t.Fatalf("topic stats of %s: %v", topic, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	var st struct {
		Subscriptions map[string]struct {
			MsgOutCounter int64 `json:"msgOutCounter"`
		} `json:"subscriptions"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("topic stats of %s: HTTP %d", topic, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("topic stats of %s: %v", topic, err)
	}
	var n int64
	for _, s := range st.Subscriptions {
		n += s.MsgOutCounter
	}
	return n
}

// metric reads one unlabelled-by-us sample from a gateway's /metrics.
func metric(t *testing.T, adminAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	for _, line := range strings.Split(buf.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
			return f
		}
	}
	t.Fatalf("%s has no %s", adminAddr, name)
	return 0
}
