package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// generate runs openapi-generator (scripts/openapi-generator.sh) on the
// served document and returns the output directory. Any error, and any
// warning beyond the generator's standing ones, fails the test.
func generate(t *testing.T, ctx context.Context, generator string, args ...string) string {
	t.Helper()
	root := repoRoot(t)
	_, spec := liveSpec(t)
	out := filepath.Join(t.TempDir(), generator)
	log := runTool(t, ctx, root, nil, filepath.Join(root, "scripts", "openapi-generator.sh"),
		append([]string{"generate", "-i", spec, "-g", generator, "-o", out}, args...)...)
	for _, line := range strings.Split(log, "\n") {
		if (strings.Contains(line, "WARN") || strings.Contains(line, "ERROR")) && !knownGeneratorWarnings.MatchString(line) {
			t.Errorf("%s: %s", generator, line)
		}
	}
	return out
}

// TestOpenAPIGeneratorGo generates openapi-generator's Go client of the
// served document, builds it with test/e2e/testdata/openapi-generator-go
// (which needs the client's one dependency, gopkg.in/validator.v2, from
// the Go module proxy or cache) and runs that against the gateway: an
// invoke, a stream of several chunks read as the generated StreamLine, a
// stream that ends in a Status line, the same read live as docs/api.md
// shows, and a typed 404.
func TestOpenAPIGeneratorGo(t *testing.T) {
	// Not parallel: the JVM would crowd the timing-sensitive tests.
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	out := generate(t, ctx, "go", "--package-name", "toolgate", "--git-user-id", "toolgate", "--git-repo-id", "oagclient")
	// The generated tests need testify; the client itself does not.
	if err := os.RemoveAll(filepath.Join(out, "test")); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "test", "e2e", "testdata", "openapi-generator-go", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(out, "cmd", "check"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "cmd", "check", "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	goEnv := []string{"GOWORK=off", "GOFLAGS=-mod=mod", "TOOLGATE_HTTP_BASE=" + env.httpBase}
	runTool(t, ctx, out, goEnv, "go", "vet", ".", "./cmd/check")
	got := runTool(t, ctx, out, goEnv, "go", "run", "./cmd/check")
	t.Log(got)
	for _, w := range []string{"invoke: ", "stream: 5 chunks", "live stream: 3 chunks", "live failing stream: ", "failing stream: ",
		"unknown tool: 5 TOOL_NOT_FOUND", "PASS"} {
		if !strings.Contains(got, w) {
			t.Errorf("the Go client's run lacks %q", w)
		}
	}
}

// TestOpenAPIGeneratorJava generates openapi-generator's Java client
// (okhttp-gson) of the served document, builds it with Maven (its
// dependencies come from Maven Central or ~/.m2) together with
// test/e2e/testdata/openapi-generator-java/Main.java, and runs that against
// the gateway: an invoke, stream lines read as the generated StreamLine —
// chunks, not the empty Status every line used to be — a stream ending in a
// Status line, and a typed 404.
func TestOpenAPIGeneratorJava(t *testing.T) {
	// Not parallel: the JVM would crowd the timing-sensitive tests.
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	out := generate(t, ctx, "java", "--additional-properties", "library=okhttp-gson,groupId=org.toolgate,artifactId=oagclient,"+
		"invokerPackage=org.toolgate.client,apiPackage=org.toolgate.client.api,modelPackage=org.toolgate.client.model,hideGenerationTimestamp=true")
	// The generated tests need JUnit; the client itself does not.
	if err := os.RemoveAll(filepath.Join(out, "src", "test")); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "test", "e2e", "testdata", "openapi-generator-java", "Main.java"))
	if err != nil {
		t.Fatal(err)
	}
	mainDir := filepath.Join(out, "src", "main", "java", "org", "toolgate", "check")
	if err := os.MkdirAll(mainDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mainDir, "Main.java"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	runTool(t, ctx, out, nil, "mvn", "-q", "-B", "-DskipTests", "-Dmaven.javadoc.skip=true",
		"compile", "dependency:build-classpath", "-Dmdep.outputFile=cp.txt")
	cp, err := os.ReadFile(filepath.Join(out, "cp.txt"))
	if err != nil {
		t.Fatal(err)
	}
	got := runTool(t, ctx, out, []string{"TOOLGATE_HTTP_BASE=" + env.httpBase},
		"java", "-cp", "target/classes"+string(os.PathListSeparator)+strings.TrimSpace(string(cp)), "org.toolgate.check.Main")
	t.Log(got)
	for _, w := range []string{"invoke: hello", "stream: 5 chunks", "failing stream: ", "unknown tool: 5 TOOL_NOT_FOUND", "PASS"} {
		if !strings.Contains(got, w) {
			t.Errorf("the Java client's run lacks %q", w)
		}
	}
}

// TestOpenAPIGeneratorPython generates openapi-generator's Python client of
// the served document and runs test/e2e/testdata/openapi-generator-python
// with it in the project's venv (whose requirements include the client's:
// pydantic, urllib3, python-dateutil): streams read line by line as they
// arrive, as docs/api.md shows — three chunks of a long stream, taken long
// before its end, and a stream ending in a Status line.
func TestOpenAPIGeneratorPython(t *testing.T) {
	// Not parallel: the JVM would crowd the timing-sensitive tests.
	root := repoRoot(t)
	venv := pythonVenv(t, root)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	out := generate(t, ctx, "python", "--package-name", "toolgate_client")
	got := runTool(t, ctx, out, []string{"TOOLGATE_HTTP_BASE=" + env.httpBase, "PYTHONPATH=" + out, "PYTHONDONTWRITEBYTECODE=1"},
		filepath.Join(venv, "bin", "python"), filepath.Join(root, "test", "e2e", "testdata", "openapi-generator-python", "check.py"))
	t.Log(got)
	for _, w := range []string{"live stream: 3 chunks", "failing stream: ", "PASS"} {
		if !strings.Contains(got, w) {
			t.Errorf("the Python client's run lacks %q", w)
		}
	}
}
