// Command wirecheck checks a running tool service against toolgate's wire
// contract over the broker, playing the gateway's side (see
// internal/wirecheck for the rules). It prints one line per rule — PASS,
// FAIL with what went wrong, or SKIP when the rule needs a call the
// service was not given — and exits 1 when a rule failed, 2 on bad usage.
//
//	go run ./cmd/wirecheck --pulsar-url pulsar://127.0.0.1:6650 --topic echo \
//	    --quick '{"msg":"hi"}' --stream '{"mode":"stream","n":20}' \
//	    --slow '{"mode":"sleep","ms":2500}' --slow-for 2.5s \
//	    --service-id echo-service --stop-command 'kill -TERM 12345'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/internal/wirecheck"
	"github.com/toolgate/toolgate/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// jsonObject is a flag holding a JSON object.
type jsonObject struct{ v map[string]any }

func (j *jsonObject) String() string {
	if j.v == nil {
		return ""
	}
	b, _ := json.Marshal(j.v)
	return string(b)
}

func (j *jsonObject) Set(s string) error {
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil || v == nil {
		return fmt.Errorf("want a JSON object: %q", s)
	}
	j.v = v
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("wirecheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("pulsar-url", envOr("TOOLGATE_PULSAR_URL", transport.DefaultPulsarURL), "Pulsar broker URL (env TOOLGATE_PULSAR_URL)")
	tokenFile := fs.String("pulsar-token-file", os.Getenv("TOOLGATE_PULSAR_TOKEN_FILE"), "file holding the broker's token (env TOOLGATE_PULSAR_TOKEN_FILE)")
	tlsCA := fs.String("pulsar-tls-ca", os.Getenv("TOOLGATE_PULSAR_TLS_CA"), "CA to trust for pulsar+ssl:// URLs (env TOOLGATE_PULSAR_TLS_CA)")
	topic := fs.String("topic", "", "the service's short topic name: non-persistent://tg/request/<topic>, replies on tg/response/<topic>")
	reqTopic := fs.String("request-topic", "", "the request topic, full name or request:tg:<name> (instead of --topic)")
	respTopic := fs.String("response-topic", "", "the response topic, full name or response:tg:<name> (instead of --topic)")
	tool := fs.String("tool", "", "the tool to call, for a service of several (config value toolgate-tool)")
	var quick, stream, slow jsonObject
	fs.Var(&quick, "quick", "arguments of a call the service answers at once, successfully (default {})")
	fs.Var(&stream, "stream", "arguments of a call answered in 3 or more messages (none: the stream rules check single replies)")
	fs.Var(&slow, "slow", "arguments of a call answered successfully after --slow-for (none: the rules that need one are skipped)")
	slowFor := fs.Duration("slow-for", 2*time.Second, "how long a --slow call takes at least")
	serviceID := fs.String("service-id", "", "the service's id, to check its announcements (with --announce-topic)")
	annTopic := fs.String("announce-topic", wire.DefaultAnnounceTopic, "where the service announces itself")
	stopCmd := fs.String("stop-command", "", "a shell command stopping the service gracefully (e.g. kill -TERM <pid>); none: the stop rule is skipped")
	only := fs.String("run", "", "run only the rules whose names match this regular expression")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "wirecheck: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected arguments %q", fs.Args())
	}
	target := wirecheck.Target{Tool: *tool, Quick: quick.v, Stream: stream.v, Slow: slow.v, SlowFor: *slowFor}
	switch {
	case *topic != "" && (*reqTopic != "" || *respTopic != ""):
		return usage("give --topic or --request-topic and --response-topic, not both")
	case *topic != "":
		target.RequestTopic, target.ResponseTopic = wire.RequestTopic(*topic), wire.ResponseTopic(*topic)
	case *reqTopic != "" && *respTopic != "":
		var err error
		if target.RequestTopic, err = wire.ExpandQueue(*reqTopic); err != nil {
			return usage("--request-topic: %v", err)
		}
		if target.ResponseTopic, err = wire.ExpandQueue(*respTopic); err != nil {
			return usage("--response-topic: %v", err)
		}
	default:
		return usage("give the service's --topic (or --request-topic and --response-topic)")
	}
	if err := wire.ValidateTopic(target.RequestTopic); err != nil {
		return usage("%v", err)
	}
	if *serviceID != "" {
		target.ServiceID, target.AnnounceTopic = *serviceID, *annTopic
	}
	if *stopCmd != "" {
		cmdline := *stopCmd
		target.Stop = func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, "sh", "-c", cmdline).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: %w: %s", cmdline, err, out)
			}
			return nil
		}
	}
	var match *regexp.Regexp
	if *only != "" {
		var err error
		if match, err = regexp.Compile(*only); err != nil {
			return usage("--run: %v", err)
		}
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	opts := pulsarbroker.ConnectionOptions(transport.Connection{URL: *url, TokenFile: *tokenFile, TLSTrustCertsFile: *tlsCA})
	opts.Logger = log
	br, err := pulsarbroker.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "wirecheck: %v\n", err)
		return 1
	}
	defer br.Close()
	s, err := wirecheck.New(ctx, br, target)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	defer s.Close()
	failed := 0
	for _, c := range wirecheck.Checks() {
		if match != nil && !match.MatchString(c.Name) {
			continue
		}
		start := time.Now()
		err := c.Run(ctx, s)
		took := time.Since(start).Round(10 * time.Millisecond)
		switch {
		case wirecheck.Skipped(err):
			fmt.Fprintf(stdout, "SKIP %-18s %v\n", c.Name, err)
		case err != nil:
			failed++
			fmt.Fprintf(stdout, "FAIL %-18s (%v) %v\n     rule: %s\n", c.Name, took, err, c.Rule)
		default:
			fmt.Fprintf(stdout, "PASS %-18s (%v)\n", c.Name, took)
		}
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "wirecheck: interrupted")
			return 1
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d rules failed\n", failed)
		return 1
	}
	return 0
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
