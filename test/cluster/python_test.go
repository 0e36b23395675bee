package cluster

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/wire"
)

// venv is the Python venv with TrustGraph's services: TOOLGATE_VENV if
// set (make test sets it), else what scripts/pyenv.sh prints (installing
// it on first use).
func venv(t *testing.T) string {
	t.Helper()
	v := os.Getenv("TOOLGATE_VENV")
	if v == "" {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "scripts/pyenv.sh")
		cmd.Dir = filepath.Join("..", "..")
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

// startPythonJokes runs TrustGraph's joke-service (from PyPI, unchanged)
// on topic, with the cluster's service URL, until the test ends; it
// returns once the service has subscribed.
func startPythonJokes(t *testing.T, c *pulsarCluster, url, topic string) {
	t.Helper()
	v := venv(t)
	logPath := filepath.Join(t.TempDir(), "joke-service.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(v, "bin", "joke-service"), "-p", url, "--id", "cluster-pyjoke",
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
	requestTopic := wire.RequestTopic(topic)
	if !eventually.Holds(90*time.Second, func() bool {
		select {
		case <-done:
			t.Fatalf("joke-service exited before subscribing to %s; output:\n%s", requestTopic, logTail())
		default:
		}
		return c.Consumers(requestTopic) > 0
	}) {
		t.Fatalf("joke-service did not subscribe to %s within 90s; output:\n%s", requestTopic, logTail())
	}
}
