package e2e

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
)

// TestSchemathesis runs schemathesis (pinned in
// scripts/python/requirements.txt) against the live server and the
// document it serves, with every check: the server must answer what the
// document says (statuses, media types, schemas, headers), accept what the
// document allows and reject what it does not. Every operation is tested,
// StreamTool included. The seed is fixed so that a failure reproduces; set
// TOOLGATE_SCHEMATHESIS_SEED to explore others.
//
// It runs against a gateway of its own whose tools all have a listening
// tool service and take any arguments: a tool's arguments_schema, which
// the document cannot know, would otherwise refuse schema-valid bodies
// (400), and a tool without a service would answer 503.
func TestSchemathesis(t *testing.T) {
	root := repoRoot(t)
	venv := pythonVenv(t, root)
	ops := []string{"GET /v1/tools", "GET /v1/tools/{name}", "POST /v1/tools/{name}:invoke",
		"POST /v1/tools/{name}:stream", "GET /v1/tool-services", "GET /v1/tool-services/{id}"}
	opsOn := append(append([]string(nil), ops...), "POST /v1/tools/{name}:start",
		"GET /v1/operations", "GET /v1/operations/{id}", "DELETE /v1/operations/{id}", "POST /v1/operations/{id}:cancel", "POST /v1/operations/{id}:wait")
	// A gateway as make run starts it but without operations, and one
	// with them: each serves the document of what it serves.
	t.Run("operations off", func(t *testing.T) { runSchemathesis(t, root, venv, false, 6, ops) })
	t.Run("operations on", func(t *testing.T) { runSchemathesis(t, root, venv, true, 13, opsOn) })
}

// runSchemathesis runs schemathesis against a gateway of its own and the
// document that gateway serves; it must test `tested` operations, among
// them those of want.
func runSchemathesis(t *testing.T, root, venv string, operations bool, tested int, want []string) {
	base := schemathesisGateway(t, operations)
	spec := filepath.Join(t.TempDir(), "toolgate.openapi.json")
	resp, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json: %v %v", resp.Status, err)
	}
	if err := os.WriteFile(spec, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	seed := os.Getenv("TOOLGATE_SCHEMATHESIS_SEED")
	if seed == "" {
		seed = "28"
	}
	dir := t.TempDir()
	junit := filepath.Join(dir, "junit.xml")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "schemathesis"), "run", spec,
		"--url", base,
		"--checks", "all",
		"--mode", "all",
		"--phases", "examples,coverage,fuzzing,stateful",
		"--max-examples", "60",
		"--seed", seed,
		"--workers", "1",
		"--request-timeout", "30",
		"--generation-database", "none",
		"--report", "junit", "--report-junit-path", junit,
		"--no-color", "--output-truncate", "false",
		// Every warning but missing_test_data: the operations' ids are
		// made at run time (their names are "operations/<id>", which no
		// link can turn into the path's id), so the routes of
		// /v1/operations/{id} answer the ids schemathesis makes up 404,
		// as they should.
		"--warnings", "missing_auth,base_url_mismatch,validation_mismatch,missing_deserializer,unused_openapi_auth,"+
			"unsupported_regex,method_not_allowed,constants_extraction,unmatched_filter,unresolvable_reference,"+
			"low_valid_rate,rate_limited,dictionary_mismatch,timeout_units",
	)
	cmd.Dir = dir // schemathesis.toml of the caller's directory must not apply
	// The hooks read NDJSON answers line by line (StreamLine is a line's
	// schema).
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1",
		"SCHEMATHESIS_HOOKS="+filepath.Join(root, "test", "e2e", "testdata", "schemathesis_hooks.py"),
		"TOOLGATE_OPENAPI="+spec)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), out.String())
	if err != nil {
		t.Fatalf("schemathesis: %v (seed %s)", err, seed)
	}
	// Every operation was tested, and no answer went unread: a document
	// schemathesis cannot read, or a media type it cannot parse, would
	// otherwise pass by testing nothing.
	if !strings.Contains(out.String(), fmt.Sprintf("Tested: %d", tested)) {
		t.Errorf(`schemathesis did not report "Tested: %d"`, tested)
	}
	if strings.Contains(out.String(), "WARNINGS") {
		t.Error("schemathesis warned (an answer it could not validate?)")
	}
	report, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var suites struct {
		Cases []struct {
			Name string `xml:"name,attr"`
		} `xml:"testsuite>testcase"`
	}
	if err := xml.Unmarshal(report, &suites); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range suites.Cases {
		seen[c.Name] = true
	}
	for _, op := range want {
		if !seen[op] {
			t.Errorf("schemathesis did not test %s (JUnit report: %v)", op, seen)
		}
	}
}

// schemathesisGateway starts a gateway whose registry holds only tools of
// the echo service, with durable operations or without (as make run has
// it), and returns its base URL.
func schemathesisGateway(t *testing.T, operations bool) string {
	t.Helper()
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	yaml := fmt.Sprintf(`tool-service:
  echo-service:
    topic: %s
tool:
  echo:
    type: tool-service
    description: Echoes its arguments
    service: echo-service
  echo-too:
    type: tool-service
    description: Echoes its arguments too
    service: echo-service
`, env.echoTopic)
	if err := os.WriteFile(reg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// Operations are short-lived echoes, kept a few minutes.
	var extra []string
	if operations {
		extra = append(brokertest.TestOperations(t).Flags(), "--operation-ttl", "5m")
	}
	gw, done, err := startGateway(ctx, reg, slog.New(slog.DiscardHandler), extra...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	return base
}
