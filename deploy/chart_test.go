package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/toolgate/toolgate/internal/config"
)

var update = flag.Bool("update", false, "rewrite testdata/default.golden.yaml from the chart")

const (
	chart     = "helm/toolgate"
	allValues = "testdata/values-all.yaml"
	golden    = "testdata/default.golden.yaml"
)

// kubernetesVersions are the Kubernetes releases the rendered manifests
// must be valid for: the oldest the chart supports (Chart.yaml kubeVersion)
// and the newest the pinned kubernetes-validate knows.
var kubernetesVersions = []string{"1.30.0", "1.37.0"}

// The flags the chart sets itself rather than from `config` or `files`,
// and the one it does not use.
var (
	chartManaged = map[string]string{
		"grpc-addr":   "ports.grpc",
		"http-addr":   "ports.http",
		"admin-addr":  "ports.admin",
		"instance-id": "the pod's name",
	}
	chartUnused = map[string]string{
		"config": "the chart's values are the configuration",
	}
)

func TestChartLint(t *testing.T) {
	t.Parallel()
	helm(t, "lint", "--strict", chart)
	helm(t, "lint", "--strict", chart, "-f", allValues)
}

// TestChartGolden keeps the manifests the default values give reviewed:
// a change to them shows in testdata/default.golden.yaml (go test
// ./deploy -run TestChartGolden -update rewrites it).
func TestChartGolden(t *testing.T) {
	t.Parallel()
	got := render(t)
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the chart's default manifests differ from %s; review the change and run go test ./deploy -run TestChartGolden -update\n%s", golden, lineDiff(string(want), string(got)))
	}
}

// TestChartValidates checks every manifest rendered from the default
// values and from values with every option set against the Kubernetes
// schemas, strictly (no unknown fields). The ServiceMonitor, a Prometheus
// Operator resource, has no schema there.
func TestChartValidates(t *testing.T) {
	t.Parallel()
	validate := kubeValidate(t)
	for name, args := range map[string][]string{"default": nil, "every option": {"-f", allValues}} {
		rendered := render(t, args...)
		docs := manifests(t, rendered)
		path := filepath.Join(t.TempDir(), "manifests.yaml")
		if err := os.WriteFile(path, rendered, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, v := range kubernetesVersions {
			out, err := exec.Command(validate, "--strict", "-k", v, path).CombinedOutput()
			if err != nil {
				t.Errorf("%s values, Kubernetes %s: kubernetes-validate: %v\n%s", name, v, err, out)
				continue
			}
			passed := strings.Count(string(out), " passed for resource ")
			want := 0
			for _, d := range docs {
				if d.Kind == "ServiceMonitor" {
					if !strings.Contains(string(out), "Couldn't find schema for kind ServiceMonitor") {
						t.Errorf("%s values, Kubernetes %s: no word on the ServiceMonitor:\n%s", name, v, out)
					}
					continue
				}
				want++
			}
			if passed != want || strings.Contains(string(out), "ERROR") {
				t.Errorf("%s values, Kubernetes %s: %d of %d resources passed:\n%s", name, v, passed, want, out)
			}
		}
	}
}

// TestChartFlags holds the chart and the gateway's --help to each other:
// every flag is in the values schema (config or files), set by the chart
// itself, or named as unused, with the type --help gives; the every-option
// values set every flag; and the gateway's own parser accepts the
// Deployment they render. A renamed flag fails here, not in a deployment.
func TestChartFlags(t *testing.T) {
	t.Parallel()
	help := gatewayFlags(t)
	schema := readSchema(t)

	for name, typ := range help {
		_, inConfig := schema.Properties.Config.Properties[name]
		_, inFiles := schema.Properties.Files.Properties[name]
		_, managed := chartManaged[name]
		_, unused := chartUnused[name]
		switch {
		case inConfig:
			want := map[string]string{"": "boolean", "int": "integer", "float": "number", "string": "string", "duration": "string"}[typ]
			if got := schema.Properties.Config.Properties[name].Type; got != want {
				t.Errorf("config.%s has type %q in values.schema.json; --help gives %q, so want %q", name, got, typ, want)
			}
		case inFiles:
			if typ != "string" {
				t.Errorf("files.%s: --help gives type %q, want a string (a path)", name, typ)
			}
		case managed, unused:
		default:
			t.Errorf("the gateway's --%s is unknown to the chart: add it to values.schema.json (config or files) and %s", name, allValues)
		}
		if b2i(inConfig)+b2i(inFiles)+b2i(managed)+b2i(unused) > 1 {
			t.Errorf("--%s is in more than one of config, files, the chart's own and the unused", name)
		}
	}
	for _, props := range []map[string]schemaType{schema.Properties.Config.Properties, schema.Properties.Files.Properties} {
		for name := range props {
			if _, ok := help[name]; !ok {
				t.Errorf("values.schema.json knows --%s, which the gateway's --help does not list", name)
			}
		}
	}
	for name := range chartManaged {
		if _, ok := help[name]; !ok {
			t.Errorf("the chart sets --%s, which the gateway's --help does not list", name)
		}
	}

	// values.yaml shows every file flag, so that helm show values documents them.
	var defaults struct{ Files map[string]any }
	readYAML(t, filepath.Join(chart, "values.yaml"), &defaults)
	if got, want := sortedKeys(defaults.Files), sortedKeys(schema.Properties.Files.Properties); !slices.Equal(got, want) {
		t.Errorf("values.yaml files: %q, values.schema.json files: %q", got, want)
	}

	// The every-option values set every flag.
	c := gatewayContainer(t, render(t, "-f", allValues))
	set := map[string]string{}
	for _, a := range c.Args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Errorf("argument %q: want --flag=value", a)
		}
		set[name] = value
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for name := range help {
		_, inArgs := set[name]
		_, inEnv := env[envName(name)]
		if _, unused := chartUnused[name]; !unused && !inArgs && !inEnv {
			t.Errorf("--%s is set neither as an argument nor as %s by %s", name, envName(name), allValues)
		}
	}
	if _, ok := env[envName("instance-id")]; !ok {
		t.Errorf("the Deployment does not set %s from the pod's name", envName("instance-id"))
	}

	// The gateway parses what the chart renders. The registry must exist;
	// the other files are read only when the gateway starts.
	registry := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(registry, []byte("tool-services: []\ntools: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(c.Args)
	for i, a := range args {
		if strings.HasPrefix(a, "--registry=") {
			args[i] = "--registry=" + registry
		}
	}
	env[envName("instance-id")] = "toolgate-5d4f8b7c9-x2x7q" // as the pod's name gives it
	if _, err := config.Parse(args, func(k string) string { return env[k] }, io.Discard); err != nil {
		t.Errorf("the gateway rejects the arguments the chart renders from %s: %v\n%q", allValues, err, args)
	}
}

// TestChartOperationsNeedAKey: with config.operations on and no
// files.operations-key-file the chart refuses to render, saying why, as
// the gateway would refuse to start.
func TestChartOperationsNeedAKey(t *testing.T) {
	t.Parallel()
	bin, err := helmBin()
	if err != nil {
		t.Fatalf("building Helm from tools/helm/go.mod: %v", err)
	}
	out, err := exec.Command(bin, "template", "toolgate", chart, "--set", "config.operations=true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "config.operations needs files.operations-key-file") {
		t.Fatalf("rendered with operations and no key: %v\n%s", err, out)
	}
	render(t, "--set", "config.operations=true", "--set", "files.operations-key-file.secretName=toolgate-operations")
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gatewayFlags reads the gateway's --help: flag name → type ("" for bool).
func gatewayFlags(t *testing.T) map[string]string {
	t.Helper()
	var usage bytes.Buffer
	if _, err := config.Parse([]string{"--help"}, func(string) string { return "" }, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("gateway --help: %v", err)
	}
	flags := map[string]string{}
	re := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)(?: ([a-z]+))?$`)
	for _, m := range re.FindAllStringSubmatch(usage.String(), -1) {
		flags[m[1]] = m[2]
		if !strings.Contains(usage.String(), "env "+envName(m[1])) {
			t.Errorf("--help does not name --%s's environment variable %s", m[1], envName(m[1]))
		}
	}
	if len(flags) < 10 {
		t.Fatalf("read %d flags from --help:\n%s", len(flags), usage.String())
	}
	return flags
}

func envName(flag string) string {
	return "TOOLGATE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

type schemaType struct {
	Type any `json:"type"`
}

type valuesSchema struct {
	Properties struct {
		Config struct{ Properties map[string]schemaType } `json:"config"`
		Files  struct{ Properties map[string]schemaType } `json:"files"`
	} `json:"properties"`
}

func readSchema(t *testing.T) valuesSchema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s valuesSchema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

type container struct {
	Name string
	Args []string
	Env  []struct{ Name, Value string }
}

type manifest struct {
	Kind string
	Spec struct {
		Template struct {
			Spec struct{ Containers []container }
		}
	}
}

// gatewayContainer is the gateway's container in the rendered Deployment.
func gatewayContainer(t *testing.T, rendered []byte) container {
	t.Helper()
	for _, d := range manifests(t, rendered) {
		if d.Kind == "Deployment" {
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Name == "gateway" {
					return c
				}
			}
		}
	}
	t.Fatal("no Deployment with a gateway container")
	return container{}
}

func manifests(t *testing.T, rendered []byte) []manifest {
	t.Helper()
	var docs []manifest
	dec := yaml.NewDecoder(bytes.NewReader(rendered))
	for {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("rendered manifests: %v", err)
		}
		if m.Kind != "" {
			docs = append(docs, m)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err == nil {
		err = yaml.Unmarshal(b, v)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// render is helm template of the chart as release "toolgate" in namespace
// "tools", with args (values files) added.
func render(t *testing.T, args ...string) []byte {
	t.Helper()
	return helm(t, append([]string{"template", "toolgate", chart, "--namespace", "tools"}, args...)...)
}

var helmBin = sync.OnceValues(func() (string, error) {
	// Builds Helm (pinned in tools/helm/go.mod) once, then names the
	// cached binary, so that parallel tests do not build it each.
	out, err := exec.Command("go", "tool", "-modfile=../tools/helm/go.mod", "-n", "helm").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = errors.New(string(ee.Stderr))
		}
		return "", err
	}
	bin := strings.TrimSpace(string(out))
	if _, err := os.Stat(bin); err != nil {
		return "", err
	}
	return bin, nil
})

// helm runs the pinned Helm in deploy/ and returns its standard output.
func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	bin, err := helmBin()
	if err != nil {
		t.Fatalf("building Helm from tools/helm/go.mod: %v", err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

// kubeValidate names kubernetes-validate, installed by deploy/kubevalidate.sh.
func kubeValidate(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("./kubevalidate.sh").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("deploy/kubevalidate.sh: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("deploy/kubevalidate.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// lineDiff lists the lines of got that want lacks and the other way round.
func lineDiff(want, got string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	w, g := count(want), count(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if w[l] > g[l] {
			b.WriteString("- " + l + "\n")
			w[l]--
		}
	}
	w = count(want)
	for _, l := range strings.Split(got, "\n") {
		if g[l] > w[l] {
			b.WriteString("+ " + l + "\n")
			g[l]--
		}
	}
	return b.String()
}
