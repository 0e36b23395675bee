// Package config reads the gateway's settings from command-line flags and
// TOOLGATE_* environment variables (flags win), validated once.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is the gateway's whole configuration.
type Config struct {
	GRPCAddr       string
	HTTPAddr       string
	PulsarURL      string
	PulsarAdminURL string
	MaxInFlight    int
	StreamIdle     time.Duration
	Registry       string
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	ShutdownGrace  time.Duration
	DefaultUser    string
	LogFormat      string
	LogLevel       string
}

// Parse reads args (without the program name) and the environment.
func Parse(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	var envErrs []error
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	str := func(p *string, name, def, usage string) {
		fs.StringVar(p, name, envOr(getenv, name, def), usage+" (env "+envName(name)+")")
	}
	dur := func(p *time.Duration, name string, def time.Duration, usage string) {
		d := def
		if v := getenv(envName(name)); v != "" {
			pd, err := time.ParseDuration(v)
			if err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s=%q: want a duration such as 30s", envName(name), v))
			}
			d = pd
		}
		fs.DurationVar(p, name, d, usage+" (env "+envName(name)+")")
	}
	str(&c.GRPCAddr, "grpc-addr", "127.0.0.1:9090", "gRPC listen address")
	str(&c.HTTPAddr, "http-addr", "127.0.0.1:8081", "HTTP/JSON listen address")
	str(&c.PulsarURL, "pulsar-url", "pulsar://127.0.0.1:6650", "Pulsar broker URL")
	str(&c.PulsarAdminURL, "pulsar-admin-url", "", "Pulsar admin URL (e.g. http://127.0.0.1:8080); when set, calls to a tool service nobody listens to fail at once with UNAVAILABLE")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", envInt(getenv, "max-in-flight", 100000, &envErrs), "calls waiting for replies at once; beyond it calls fail with RESOURCE_EXHAUSTED (env "+envName("max-in-flight")+")")
	dur(&c.StreamIdle, "stream-idle-timeout", 0, "end a stream whose next chunk takes longer than this; 0 = only the call's deadline")
	str(&c.Registry, "registry", "", "tool registry file (JSON or YAML); required")
	dur(&c.DefaultTimeout, "default-timeout", 30*time.Second, "deadline of a call when neither caller nor tool service sets one")
	dur(&c.MaxTimeout, "max-timeout", 10*time.Minute, "the longest deadline a caller may ask for")
	dur(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long calls in flight may finish after SIGTERM")
	str(&c.DefaultUser, "default-user", "anonymous", "envelope user for calls without an authenticated identity")
	str(&c.LogFormat, "log-format", "text", "log format: text or json")
	str(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return c, errors.Join(append(envErrs, c.validate())...)
}

func (c Config) validate() error {
	var errs []error
	for _, a := range []struct{ name, v string }{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: want host:port", a.name, a.v))
		}
	}
	if !strings.HasPrefix(c.PulsarURL, "pulsar://") && !strings.HasPrefix(c.PulsarURL, "pulsar+ssl://") {
		errs = append(errs, fmt.Errorf("--pulsar-url %q: want pulsar://host:port or pulsar+ssl://host:port", c.PulsarURL))
	}
	if c.PulsarAdminURL != "" && !strings.HasPrefix(c.PulsarAdminURL, "http://") && !strings.HasPrefix(c.PulsarAdminURL, "https://") {
		errs = append(errs, fmt.Errorf("--pulsar-admin-url %q: want http://host:port", c.PulsarAdminURL))
	}
	if c.MaxInFlight <= 0 {
		errs = append(errs, errors.New("--max-in-flight must be positive"))
	}
	if c.StreamIdle < 0 {
		errs = append(errs, errors.New("--stream-idle-timeout must not be negative"))
	}
	if c.Registry == "" {
		errs = append(errs, errors.New("--registry is required: a JSON or YAML file with tool-service and tool sections"))
	} else if _, err := os.Stat(c.Registry); err != nil {
		errs = append(errs, fmt.Errorf("--registry: %v", err))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"default-timeout", c.DefaultTimeout}, {"max-timeout", c.MaxTimeout}, {"shutdown-grace", c.ShutdownGrace}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be a positive duration such as 30s", d.name))
		}
	}
	if c.DefaultTimeout > c.MaxTimeout && c.MaxTimeout > 0 {
		errs = append(errs, errors.New("--default-timeout must not exceed --max-timeout"))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", c.LogFormat))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel))
	}
	return errors.Join(errs...)
}

func envName(flagName string) string {
	return "TOOLGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func envInt(getenv func(string) string, name string, def int, errs *[]error) int {
	v := getenv(envName(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s=%q: want a whole number", envName(name), v))
		return def
	}
	return n
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(envName(name)); v != "" {
		return v
	}
	return def
}
