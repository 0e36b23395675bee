package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
)

func TestListenerPID(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pid, err := listenerPID(l.Addr().String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if pid != os.Getpid() {
		t.Fatalf("listenerPID(%s) = %d, want this test's pid %d", l.Addr(), pid, os.Getpid())
	}
	free, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := listenerPID(free, 0); err == nil {
		t.Fatalf("listenerPID(%s), where nothing listens: pid %d and no error", free, pid)
	}
}

// TestWaitReadyRefusesAnotherProcess is the trap of a fixed port: another
// process already answers /readyz on the address the started server was
// given. waitReady must not take that one for it.
func TestWaitReadyRefusesAnotherProcess(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	c, err := startChild(t.TempDir(), "impostor-victim", sleep, "30")
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop(time.Second)
	c.httpAddr = l.Addr().String()
	err = c.waitReady(t.Context(), 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "is not the process listening") {
		t.Fatalf("waitReady with another process on the port: %v, want a refusal", err)
	}
}

// TestBrokerPID finds the broker the tests use by its listening port,
// whatever port that is.
func TestBrokerPID(t *testing.T) {
	brokertest.RequirePulsar(t)
	pid := brokerPID(t.TempDir(), brokertest.PulsarURL(), brokertest.AdminURL())
	if pid == 0 {
		t.Fatalf("no broker pid for %s", brokertest.PulsarURL())
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(b), "PulsarStandaloneStarter") {
		t.Fatalf("pid %d is not a Pulsar broker (%v): %s", pid, err, cmdline(pid))
	}
}
