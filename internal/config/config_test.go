package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/idempotency"
	"github.com/toolgate/toolgate/internal/limits"
	"github.com/toolgate/toolgate/internal/transport"
)

func TestParse(t *testing.T) {
	t.Parallel()
	reg := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(reg, []byte("tool: {}"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOOLGATE_REGISTRY": reg, "TOOLGATE_DEFAULT_TIMEOUT": "5s", "TOOLGATE_ALLOW_ANONYMOUS": "true", "TOOLGATE_RATE_LIMIT": "2.5"}
	getenv := func(k string) string { return env[k] }
	c, err := Parse([]string{"--grpc-addr", "127.0.0.1:1"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.GRPC.Addr != "127.0.0.1:1" || c.HTTP.Addr != "127.0.0.1:8081" || c.Core.DefaultTimeout != 5*time.Second || !c.Auth.AllowAnonymous || c.Rate.Limit != 2.5 || c.Registry.File != reg {
		t.Fatalf("parsed %+v", c)
	}
	if !c.Pulsar.Batching || c.GRPC.Workers != DefaultGRPCWorkers || !c.MCP.Enabled || c.GCHeapMiB != 64 {
		t.Fatalf("defaults: batching %v, gRPC workers %d, MCP %v, GC heap %d MiB; want true, %d, true, 64", c.Pulsar.Batching, c.GRPC.Workers, c.MCP.Enabled, c.GCHeapMiB, DefaultGRPCWorkers)
	}
	h2 := limits.HTTP2{MaxConcurrentStreams: limits.DefaultMaxConcurrentStreams, MaxResets: limits.DefaultMaxResets,
		MaxPings: limits.DefaultMaxPings, MaxSettings: limits.DefaultMaxSettings, CalmHold: limits.DefaultCalmHold}
	if want := (limits.Requests{MaxBodyBytes: limits.DefaultMaxBody, MaxHeaderBytes: limits.DefaultMaxHeaderBytes, BodyTimeout: limits.DefaultBodyTimeout, HTTP2: h2}); c.Limits != want {
		t.Fatalf("request limits %+v by default, want %+v", c.Limits, want)
	}
	if c, err := Parse([]string{"--max-body-bytes", "2048", "--max-header-bytes", "4096", "--body-timeout", "0",
		"--http2-max-streams", "10", "--http2-max-resets", "-1", "--http2-max-pings", "5", "--http2-max-settings", "7", "--http2-calm-hold", "0"}, getenv, io.Discard); err != nil ||
		c.Limits != (limits.Requests{MaxBodyBytes: 2048, MaxHeaderBytes: 4096, HTTP2: limits.HTTP2{MaxConcurrentStreams: 10, MaxResets: -1, MaxPings: 5, MaxSettings: 7}}) {
		t.Fatalf("request limits %+v, %v; want 2048, 4096, none", c.Limits, err)
	}
	if c.AdminAddr != DefaultAdminAddr || !strings.HasPrefix(c.AdminAddr, "127.0.0.1:") {
		t.Fatalf("admin listener %q by default, want %s (loopback)", c.AdminAddr, DefaultAdminAddr)
	}
	for _, off := range []string{"--admin-addr=", "--admin-addr=off"} {
		if c, err := Parse([]string{off}, getenv, io.Discard); err != nil || c.AdminAddr != "" {
			t.Fatalf("%s: admin listener %q, %v; want it off", off, c.AdminAddr, err)
		}
	}
	if strings.Join(c.Registry.Announce.RequestNamespaces, ",") != "tg/request" || strings.Join(c.Registry.Announce.ResponseNamespaces, ",") != "tg/response" || c.Registry.Announce.Takeover {
		t.Fatalf("announce defaults: %+v; want tg/request, tg/response, no takeover", c.Registry.Announce)
	}
	if c, err := Parse([]string{"--announce-request-namespaces", "tg/request, acme/in"}, getenv, io.Discard); err != nil || strings.Join(c.Registry.Announce.RequestNamespaces, "|") != "tg/request|acme/in" {
		t.Fatalf("--announce-request-namespaces: %v, %v", c.Registry.Announce.RequestNamespaces, err)
	}
	if c.Registry.Announce.ClaimGrace != 15*time.Minute || len(c.Registry.Announce.Release) != 0 {
		t.Fatalf("claim defaults: %+v; want a grace of 15m, no service released", c.Registry.Announce)
	}
	if c, err := Parse([]string{"--announce-claim-grace", "0", "--announce-release", "a, b"}, getenv, io.Discard); err != nil || c.Registry.Announce.ClaimGrace != 0 || strings.Join(c.Registry.Announce.Release, "|") != "a|b" {
		t.Fatalf("--announce-claim-grace 0 --announce-release: %+v, %v", c.Registry.Announce, err)
	}
	if c, _ := Parse([]string{"--mcp=false"}, getenv, io.Discard); c.MCP.Enabled {
		t.Fatal("--mcp=false left MCP on")
	}
	// Flags win over the environment.
	if c, _ := Parse([]string{"--default-timeout", "7s"}, getenv, io.Discard); c.Core.DefaultTimeout != 7*time.Second {
		t.Fatalf("flag did not win: %v", c.Core.DefaultTimeout)
	}
	env["TOOLGATE_PULSAR_BATCHING"] = "false"
	env["TOOLGATE_GC_HEAP_MIB"] = "0"
	if c, _ := Parse(nil, getenv, io.Discard); c.GCHeapMiB != 0 {
		t.Fatalf("TOOLGATE_GC_HEAP_MIB=0 gave %d MiB", c.GCHeapMiB)
	}
	if c, _ := Parse([]string{"--grpc-workers", "64"}, getenv, io.Discard); c.Pulsar.Batching || c.GRPC.Workers != 64 {
		t.Fatalf("batching %v, gRPC workers %d; want false, 64", c.Pulsar.Batching, c.GRPC.Workers)
	}
}

// The idempotency keys have no store by default: keys are refused.
func TestIdempotencyFlags(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string { return map[string]string{"TOOLGATE_ALLOW_ANONYMOUS": "true"}[k] }
	c, err := Parse(nil, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Idempotency{RedisTimeout: idempotency.DefaultRedisTimeout, Window: idempotency.DefaultWindow, MaxAnswerBytes: idempotency.DefaultMaxAnswerBytes}); c.Idempotency != want {
		t.Fatalf("idempotency %+v by default, want %+v (no store)", c.Idempotency, want)
	}
	if c, err := Parse([]string{"--idempotency-redis-url", "redis://r:6379/1", "--idempotency-window", "1h"}, getenv, io.Discard); err != nil ||
		c.Idempotency.RedisURL != "redis://r:6379/1" || c.Idempotency.Window != time.Hour {
		t.Fatalf("--idempotency-redis-url, --idempotency-window: %+v, %v", c.Idempotency, err)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{nil, nil, []string{"no way to authenticate"}},
		{[]string{"--announcements=false", "--allow-anonymous"}, nil, []string{"no registry source"}},
		{[]string{"--announce-topic", "non-persistent://tg/config/x", "--allow-anonymous"}, nil, []string{"must be a persistent:// topic"}},
		{[]string{"--registry", "/nonexistent", "--allow-anonymous", "--grpc-addr", "nohost"}, nil, []string{"--registry", "--grpc-addr \"nohost\""}},
		{[]string{"--allow-anonymous", "--pulsar-url", "http://x"}, nil, []string{"--pulsar-url"}},
		{[]string{"--allow-anonymous", "--admin-addr", "8082"}, nil, []string{"--admin-addr \"8082\": want host:port"}},
		{[]string{"--allow-anonymous", "--http2-calm-hold", "-1s"}, nil, []string{"--http2-calm-hold -1s: want 0 (none) up to 1m"}},
		{[]string{"--allow-anonymous", "--announce-request-namespaces", "tg/config"}, nil, []string{"namespace of --announce-topic"}},
		{[]string{"--allow-anonymous", "--announce-response-namespaces", "tg"}, nil, []string{"--announce-response-namespaces \"tg\": want tenant/namespace"}},
		{[]string{"--allow-anonymous", "--announce-request-namespaces", " , "}, nil, []string{"--announce-request-namespaces must name at least one"}},
		{[]string{"--allow-anonymous", "--announce-claim-grace", "-1s"}, nil, []string{"--announce-claim-grace -1s: want 0 or more"}},
		{[]string{"--allow-anonymous"}, map[string]string{"TOOLGATE_DEFAULT_TIMEOUT": "soon"}, []string{`TOOLGATE_DEFAULT_TIMEOUT="soon"`}},
		{[]string{"--allow-anonymous", "--client-ca", "ca.pem"}, nil, []string{"--client-ca needs --tls-cert"}},
		{[]string{"--allow-anonymous", "--tls-cert", "c.pem"}, nil, []string{"--tls-cert and --tls-key go together"}},
		{[]string{"--allow-anonymous", "--log-format", "xml"}, nil, []string{"--log-format"}},
		{[]string{"--allow-anonymous", "extra"}, nil, []string{"unexpected arguments"}},
		{[]string{"--allow-anonymous", "--grpc-workers", "-1"}, nil, []string{"--grpc-workers must not be negative"}},
		{[]string{"--allow-anonymous", "--gc-heap-mib", "-1"}, nil, []string{"--gc-heap-mib must be between 0 and 1048576"}},
		{[]string{"--allow-anonymous", "--max-body-bytes", "0", "--max-header-bytes", "10", "--body-timeout", "-1s"}, nil,
			[]string{"--max-body-bytes must be between", "--max-header-bytes must be between", "--body-timeout must not be negative"}},
		{[]string{"--allow-anonymous", "--http2-max-streams", "0", "--http2-max-resets", "-2", "--http2-max-pings", "2000000"}, nil,
			[]string{"--http2-max-streams must be between 1 and 1048576, or -1", "--http2-max-resets must be", "--http2-max-pings must be"}},
		{[]string{"--allow-anonymous"}, map[string]string{"TOOLGATE_PULSAR_BATCHING": "maybe"}, []string{`TOOLGATE_PULSAR_BATCHING="maybe"`}},
		{[]string{"--allow-anonymous", "--mcp-resource", "gw.example.com/mcp"}, nil, []string{"--mcp-resource \"gw.example.com/mcp\": want an absolute https:// URI", "needs --mcp-authorization-servers or --jwt-issuer", "needs --jwt-jwks-file"}},
		{[]string{"--jwt-jwks-file", "k.json", "--jwt-issuer", "https://auth.test", "--mcp-resource", "https://gw.test/mcp", "--mcp=false"}, nil, []string{"--mcp-resource needs --mcp"}},
		{[]string{"--allow-anonymous", "--mcp-scopes", "tools"}, nil, []string{"describe --mcp-resource: give it too"}},
		{[]string{"--allow-anonymous", "--operations"}, nil, []string{"--operations needs --operations-key-file"}},
		{[]string{"--allow-anonymous", "--operations", "--operations-key-file", "k", "--operations-reply-topic", "persistent://public/default/replies"}, nil, []string{"--operations-reply-topic \"persistent://public/default/replies\": want a persistent topic of the response namespace"}},
		{[]string{"--allow-anonymous", "--operations", "--operations-key-file", "k", "--operations-state-topic", "non-persistent://tg/operations/s"}, nil, []string{"--operations-state-topic \"non-persistent://tg/operations/s\": want a persistent:// topic"}},
		{[]string{"--allow-anonymous", "--operations", "--operations-key-file", "k", "--operations-chunk-topic", "persistent://tg/operations/state"}, nil, []string{"must be three different topics"}},
		{[]string{"--jwt-jwks-file", "k.json", "--mcp-resource", "https://gw.test/mcp", "--mcp-authorization-servers", "auth.test"}, nil, []string{`--mcp-authorization-servers "auth.test"`}},
		{[]string{"--allow-anonymous", "--quota-redis-url", "http://r:6379"}, nil, []string{"--quota-redis-url keeps the counts of --quota-rules", `--quota-redis-url "http://r:6379"`}},
		{[]string{"--allow-anonymous", "--quota-redis-failure", "maybe"}, nil, []string{`--quota-redis-failure "maybe": want open or closed`}},
		{[]string{"--allow-anonymous", "--quota-redis-timeout", "0s"}, nil, []string{"--quota-redis-timeout must be a positive"}},
		{[]string{"--allow-anonymous", "--idempotency-redis-url", "http://r:6379", "--idempotency-redis-timeout", "0s", "--idempotency-window", "30s", "--idempotency-max-answer-bytes", "0"}, nil,
			[]string{`--idempotency-redis-url "http://r:6379"`, "--idempotency-redis-timeout must be a positive", "--idempotency-window must be", "--idempotency-max-answer-bytes must be at least 1"}},
	}
	for _, c := range cases {
		_, err := Parse(c.args, func(k string) string { return c.env[k] }, io.Discard)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%v, %v) = %v; want an error mentioning %q", c.args, c.env, err, w)
			}
		}
	}
}

// TestMCPResource: --mcp-resource is the JWTs' audience unless
// --jwt-audience says otherwise, and --jwt-issuer the authorization server
// unless --mcp-authorization-servers names them.
func TestMCPResource(t *testing.T) {
	t.Parallel()
	base := []string{"--jwt-jwks-file", "k.json", "--jwt-issuer", "https://auth.test", "--mcp-resource", "https://gw.test/mcp"}
	c, err := Parse(base, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.JWTAudience != "https://gw.test/mcp" || strings.Join(c.MCP.OAuth.AuthorizationServers, ",") != "https://auth.test" || c.MCP.OAuth.Scopes != nil {
		t.Fatalf("audience %q, authorization servers %v, scopes %v", c.Auth.JWTAudience, c.MCP.OAuth.AuthorizationServers, c.MCP.OAuth.Scopes)
	}
	c, err = Parse(append(base, "--jwt-audience", "toolgate", "--mcp-authorization-servers", "https://a.test, https://b.test", "--mcp-scopes", "tools,admin"),
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.JWTAudience != "toolgate" || strings.Join(c.MCP.OAuth.AuthorizationServers, " ") != "https://a.test https://b.test" || strings.Join(c.MCP.OAuth.Scopes, " ") != "tools admin" {
		t.Fatalf("audience %q, authorization servers %v, scopes %v", c.Auth.JWTAudience, c.MCP.OAuth.AuthorizationServers, c.MCP.OAuth.Scopes)
	}
}

func TestConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	reg := filepath.Join(dir, "r.yaml")
	_ = os.WriteFile(reg, []byte("tool: {}"), 0o644)
	file := filepath.Join(dir, "toolgate.yaml")
	_ = os.WriteFile(file, []byte("registry: "+reg+"\nallow-anonymous: true\ndefault-timeout: 9s\nrate-burst: 7\nhttp-addr: 127.0.0.1:1\n"), 0o644)
	env := map[string]string{"TOOLGATE_HTTP_ADDR": "127.0.0.1:2"}
	c, err := Parse([]string{"--config", file, "--rate-burst", "8"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Registry.File != reg || !c.Auth.AllowAnonymous || c.Core.DefaultTimeout != 9*time.Second {
		t.Fatalf("file values not applied: %+v", c)
	}
	if c.Rate.Burst != 8 || c.HTTP.Addr != "127.0.0.1:2" {
		t.Fatalf("flags and env must win over the file: burst %d, http %s", c.Rate.Burst, c.HTTP.Addr)
	}
	_ = os.WriteFile(file, []byte("registry: [a, b]\n"), 0o644)
	if _, err := Parse([]string{"--config=" + file}, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), `"registry" must be a single value`) {
		t.Fatalf("bad file: %v", err)
	}
}

// TestPulsarConnection: the broker settings become the one Connection
// every Pulsar client of the gateway is made from.
func TestPulsarConnection(t *testing.T) {
	t.Parallel()
	p := Pulsar{URL: "pulsar+ssl://b:6651", AdminURL: "http://b:8080", TokenFile: "/run/token", TLSCA: "/run/ca.pem", Batching: true}
	if got, want := p.Connection(), (transport.Connection{URL: "pulsar+ssl://b:6651", TokenFile: "/run/token", TLSTrustCertsFile: "/run/ca.pem"}); got != want {
		t.Fatalf("Connection() = %+v, want %+v", got, want)
	}
}

// TestZeroIsOff: a setting that can be off is off at 0 in the Config, as
// on the command line, and the bridge is handed it in its own terms (a
// negative value); the defaults pass through as they are.
func TestZeroIsOff(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string {
		return map[string]string{"TOOLGATE_ALLOW_ANONYMOUS": "true", "TOOLGATE_ANNOUNCEMENTS": "true"}[k]
	}
	c, err := Parse(nil, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Bridge.Options(); o.MaxInFlightPerService != bridge.DefaultMaxInFlightPerService || o.StreamWindow != bridge.DefaultStreamWindow ||
		o.MaxInFlight != bridge.DefaultMaxInFlight || o.ServiceQueueWait != bridge.DefaultServiceQueueWait {
		t.Fatalf("the bridge's options by default: %+v", o)
	}
	c, err = Parse([]string{"--max-in-flight-per-service", "0", "--stream-window", "0"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Bridge.MaxInFlightPerService != 0 || c.Bridge.StreamWindow != 0 {
		t.Fatalf("off on the command line: %+v, want 0 (off) in the Config", c.Bridge)
	}
	if o := c.Bridge.Options(); o.MaxInFlightPerService >= 0 || o.StreamWindow >= 0 {
		t.Fatalf("off: the bridge is handed %d and %d, want negative (off)", o.MaxInFlightPerService, o.StreamWindow)
	}
}
