package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPythonClients runs the Python clients of test/python against this
// package's gateway: a gRPC client on stubs generated from proto/, with
// reflection and health, and a REST client driven by the OpenAPI document.
// The venv is $TOOLGATE_VENV, else the one scripts/pyenv.sh provides. No
// venv, a pytest failure or no test collected all fail the test.
func TestPythonClients(t *testing.T) {
	// Not parallel: pytest's CPU use would crowd the timing-sensitive tests.
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	venv := pythonVenv(t, root)
	python := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("no Python in the venv %s: %v", venv, err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-q", "-rfEs",
		"-p", "no:cacheprovider", "test/python", "-k", "grpc_client or openapi_client")
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"TOOLGATE_GRPC_ADDR="+env.gw.GRPCAddr(),
		"TOOLGATE_HTTP_BASE="+env.httpBase,
		"PYTHONDONTWRITEBYTECODE=1",
	)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err = cmd.Run()
	t.Logf("%s (%s):\n%s", strings.Join(cmd.Args, " "), time.Since(start).Round(time.Millisecond), out.String())
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() == 5:
		t.Fatal("pytest collected no tests")
	case ctx.Err() != nil:
		t.Fatalf("pytest did not finish in time: %v", err)
	default:
		t.Fatalf("pytest: %v", err)
	}
	if strings.Contains(out.String(), " skipped") {
		t.Fatal("pytest skipped tests; every Python client test must run")
	}
}

// pythonVenv returns $TOOLGATE_VENV, else the venv scripts/pyenv.sh ensures
// (installing it on first use).
func pythonVenv(t *testing.T, root string) string {
	t.Helper()
	if v := os.Getenv("TOOLGATE_VENV"); v != "" {
		return v
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(root, "scripts", "pyenv.sh"))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/pyenv.sh: %v\n%s", err, stderr.String())
	}
	venv := strings.TrimSpace(string(out))
	if venv == "" {
		t.Fatalf("scripts/pyenv.sh printed no venv path\n%s", stderr.String())
	}
	return venv
}
