package config

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// flags is the flag set the sub-configs register on: each flag's default
// is its environment variable's value when set, else the default given,
// and its usage names the variable.
type flags struct {
	fs     *flag.FlagSet
	getenv func(string) string
	errs   []error  // environment values that could not be read, and what after found
	after  []func() // run once the flags are parsed
}

func newFlags(getenv func(string) string, stderr io.Writer) *flags {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &flags{fs: fs, getenv: getenv}
}

// parse parses args, then runs what the sub-configs left for after.
func (f *flags) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	for _, fn := range f.after {
		fn()
	}
	return nil
}

// then runs fn once the flags are parsed.
func (f *flags) then(fn func()) { f.after = append(f.after, fn) }

func usage(name, text string) string { return text + " (env " + envName(name) + ")" }

func (f *flags) str(p *string, name, def, text string) {
	f.fs.StringVar(p, name, envOr(f.getenv, name, def), usage(name, text))
}

// list is a comma-separated list flag: its items, trimmed, empty ones
// left out.
func (f *flags) list(p *[]string, name string, def []string, text string) {
	s := new(string)
	f.str(s, name, strings.Join(def, ","), text)
	f.then(func() { *p = commaList(*s) })
}

func (f *flags) dur(p *time.Duration, name string, def time.Duration, text string) {
	d := def
	if v := f.getenv(envName(name)); v != "" {
		pd, err := time.ParseDuration(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s=%q: want a duration such as 30s", envName(name), v))
		} else {
			d = pd
		}
	}
	f.fs.DurationVar(p, name, d, usage(name, text))
}

func (f *flags) int(p *int, name string, def int, text string) {
	f.fs.IntVar(p, name, envInt(f.getenv, name, def, &f.errs), usage(name, text))
}

func (f *flags) bool(p *bool, name string, def bool, text string) {
	f.fs.BoolVar(p, name, envBool(f.getenv, name, def, &f.errs), usage(name, text))
}

func (f *flags) float(p *float64, name string, def float64, text string) {
	f.fs.Float64Var(p, name, envFloat(f.getenv, name, def, &f.errs), usage(name, text))
}

// commaList is the non-empty, trimmed items of a comma-separated list.
func commaList(s string) []string {
	var out []string
	for _, o := range strings.Split(s, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

func envName(flagName string) string {
	return "TOOLGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// withConfigFile is getenv, falling back on the config file's values
// (--config or TOOLGATE_CONFIG) when there is one.
func withConfigFile(args []string, getenv func(string) string) (func(string) string, error) {
	path := configPath(args, getenv)
	if path == "" {
		return getenv, nil
	}
	file, err := loadFile(path)
	if err != nil {
		return nil, err
	}
	return func(k string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return file[k]
	}, nil
}

// configPath finds --config in args, else TOOLGATE_CONFIG.
func configPath(args []string, getenv func(string) string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		for _, p := range []string{"--config", "-config"} {
			if a == p && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v
			}
		}
	}
	return getenv("TOOLGATE_CONFIG")
}

// loadFile reads a config file into environment-variable form.
func loadFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("--config %s: not a YAML or JSON mapping: %w", path, err)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch v.(type) {
		case map[string]any, []any, nil:
			return nil, fmt.Errorf("--config %s: %q must be a single value", path, k)
		}
		out[envName(k)] = fmt.Sprint(v)
	}
	return out, nil
}

func envBool(getenv func(string) string, name string, def bool, errs *[]error) bool {
	v := getenv(envName(name))
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s=%q: want true or false", envName(name), v))
		return def
	}
	return b
}

func envFloat(getenv func(string) string, name string, def float64, errs *[]error) float64 {
	v := getenv(envName(name))
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s=%q: want a number", envName(name), v))
		return def
	}
	return f
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
