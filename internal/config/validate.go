package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/doorconf"
	"github.com/toolgate/toolgate/wire"
)

func (c Config) validate() error {
	var errs []error
	addrs := []struct{ name, v string }{{"grpc-addr", c.GRPC.Addr}, {"http-addr", c.HTTP.Addr}}
	if c.AdminAddr != "" {
		addrs = append(addrs, struct{ name, v string }{"admin-addr", c.AdminAddr})
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: want host:port", a.name, a.v))
		}
	}
	if !strings.HasPrefix(c.Pulsar.URL, "pulsar://") && !strings.HasPrefix(c.Pulsar.URL, "pulsar+ssl://") {
		errs = append(errs, fmt.Errorf("--pulsar-url %q: want pulsar://host:port or pulsar+ssl://host:port", c.Pulsar.URL))
	}
	if c.Pulsar.AdminURL != "" {
		for u := range strings.SplitSeq(c.Pulsar.AdminURL, ",") {
			if u = strings.TrimSpace(u); !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				errs = append(errs, fmt.Errorf("--pulsar-admin-url %q: want http://host:port, or several separated by commas", c.Pulsar.AdminURL))
				break
			}
		}
	}
	if !instanceIDRE.MatchString(c.InstanceID) {
		errs = append(errs, fmt.Errorf("--instance-id %q: want 1 to 200 letters, digits and . _ - = (it ends the name of the instance's reply topic)", c.InstanceID))
	}
	if c.GCHeapMiB < 0 || c.GCHeapMiB > 1<<20 {
		errs = append(errs, errors.New("--gc-heap-mib must be between 0 and 1048576"))
	}
	if c.GRPC.Workers < 0 {
		errs = append(errs, errors.New("--grpc-workers must not be negative"))
	}
	if c.Bridge.MaxInFlight <= 0 {
		errs = append(errs, errors.New("--max-in-flight must be positive"))
	}
	if c.Bridge.MaxInFlightPerService < 0 {
		errs = append(errs, errors.New("--max-in-flight-per-service must not be negative"))
	}
	if h := c.Bridge.HedgeAfter; h < 0 || (h > 0 && h <= wire.ReceiptAfter) {
		errs = append(errs, fmt.Errorf("--hedge-after must be 0 (off) or longer than %s, the time after which a service sends a call's receipt (got %s)", wire.ReceiptAfter, h))
	}
	if c.Bridge.ServiceQueueWait < 0 {
		errs = append(errs, errors.New("--service-queue-wait must not be negative"))
	}
	if c.Bridge.StreamWindow < 0 || c.Bridge.StreamWindow > 4000 {
		errs = append(errs, errors.New("--stream-window must be between 0 and 4000"))
	}
	if c.Operations.TTL <= 0 {
		errs = append(errs, errors.New("--operation-ttl must be positive"))
	}
	if c.Operations.MaxPerCaller <= 0 {
		errs = append(errs, errors.New("--max-operations-per-caller must be positive"))
	}
	if c.Operations.Enabled {
		errs = append(errs, c.validateOperations()...)
	}
	if c.Core.StreamIdle < 0 {
		errs = append(errs, errors.New("--stream-idle-timeout must not be negative"))
	}
	if c.Limits.BodyTimeout < 0 {
		errs = append(errs, errors.New("--body-timeout must not be negative"))
	}
	if c.Audit.Queue <= 0 {
		errs = append(errs, errors.New("--audit-queue must be positive"))
	}
	if c.Audit.Arguments && c.Audit.File == "" {
		errs = append(errs, errors.New("--audit-arguments needs --audit"))
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	if c.TLS.ClientCA != "" && c.TLS.Cert == "" {
		errs = append(errs, errors.New("--client-ca needs --tls-cert and --tls-key: client certificates travel over TLS"))
	}
	if c.Rate.Limit < 0 || c.Rate.Burst < 1 {
		errs = append(errs, errors.New("--rate-limit must not be negative and --rate-burst must be at least 1"))
	}
	if c.Quota.RedisURL != "" {
		if c.Quota.Rules == "" {
			errs = append(errs, errors.New("--quota-redis-url keeps the counts of --quota-rules: give it too"))
		}
		if u, err := url.Parse(c.Quota.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
			errs = append(errs, fmt.Errorf("--quota-redis-url %q: want redis://host:port, rediss://host:port or unix:///path", c.Quota.RedisURL))
		}
	}
	if c.Quota.RedisTimeout <= 0 {
		errs = append(errs, errors.New("--quota-redis-timeout must be a positive duration such as 250ms"))
	}
	if u := c.Idempotency.RedisURL; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "redis" && pu.Scheme != "rediss" && pu.Scheme != "unix") {
			errs = append(errs, fmt.Errorf("--idempotency-redis-url %q: want redis://host:port, rediss://host:port or unix:///path", u))
		}
	}
	if c.Idempotency.RedisTimeout <= 0 {
		errs = append(errs, errors.New("--idempotency-redis-timeout must be a positive duration such as 250ms"))
	}
	if c.Idempotency.Window < time.Minute {
		errs = append(errs, errors.New("--idempotency-window must be a duration of a minute or more, such as 24h"))
	}
	if c.Idempotency.MaxAnswerBytes < 1 {
		errs = append(errs, errors.New("--idempotency-max-answer-bytes must be at least 1"))
	}
	if c.HTTP.SSEHeartbeat <= 0 {
		errs = append(errs, errors.New("--sse-heartbeat must be a positive duration such as 15s"))
	}
	for _, o := range c.HTTP.CORSOrigins {
		if o != "*" && !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") {
			errs = append(errs, fmt.Errorf("--cors-origins %q: want origins such as https://app.example.com, or *", o))
		}
	}
	if r := c.MCP.OAuth.Resource; r != "" {
		if err := doorconf.CheckMCPResource(r); err != nil {
			errs = append(errs, fmt.Errorf("--mcp-resource %q: %w", r, err))
		}
		if !c.MCP.Enabled {
			errs = append(errs, errors.New("--mcp-resource needs --mcp: the resource is the MCP endpoint"))
		}
		if len(c.MCP.OAuth.AuthorizationServers) == 0 {
			errs = append(errs, errors.New("--mcp-resource needs --mcp-authorization-servers or --jwt-issuer: clients must learn where to get tokens"))
		}
		if c.Auth.JWTSecretFile == "" && c.Auth.JWTJWKSFile == "" {
			errs = append(errs, errors.New("--mcp-resource needs --jwt-jwks-file or --jwt-hs256-secret-file: the authorization servers' tokens are JWTs the gateway checks"))
		}
	} else if len(c.MCP.OAuth.AuthorizationServers) > 0 || len(c.MCP.OAuth.Scopes) > 0 {
		errs = append(errs, errors.New("--mcp-authorization-servers and --mcp-scopes describe --mcp-resource: give it too"))
	}
	for _, a := range c.MCP.OAuth.AuthorizationServers {
		if u, err := url.Parse(a); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--mcp-authorization-servers %q: want issuer URLs such as https://auth.example.com", a))
		}
	}
	if c.MCP.CacheTTL < 0 {
		errs = append(errs, errors.New("--mcp-cache-ttl must not be negative"))
	}
	if c.Limits.MaxBodyBytes < 1 || c.Limits.MaxBodyBytes > 1<<30 {
		errs = append(errs, errors.New("--max-body-bytes must be between 1 and 1073741824"))
	}
	if c.Limits.MaxHeaderBytes < 1024 || c.Limits.MaxHeaderBytes > 16<<20 {
		errs = append(errs, errors.New("--max-header-bytes must be between 1024 and 16777216"))
	}
	for _, b := range []struct {
		flag string
		v    int
	}{{"http2-max-streams", c.Limits.HTTP2.MaxConcurrentStreams}, {"http2-max-resets", c.Limits.HTTP2.MaxResets},
		{"http2-max-pings", c.Limits.HTTP2.MaxPings}, {"http2-max-settings", c.Limits.HTTP2.MaxSettings}} {
		if b.v == 0 || b.v < -1 || b.v > 1<<20 {
			errs = append(errs, fmt.Errorf("--%s must be between 1 and 1048576, or -1 for no bound (got %d)", b.flag, b.v))
		}
	}
	if h := c.Limits.HTTP2.CalmHold; h < 0 || h > time.Minute {
		errs = append(errs, fmt.Errorf("--http2-calm-hold %v: want 0 (none) up to 1m", h))
	}
	if c.Auth.APIKeys == "" && c.Auth.JWTSecretFile == "" && c.Auth.JWTJWKSFile == "" && c.TLS.ClientCA == "" && !c.Auth.AllowAnonymous {
		errs = append(errs, errors.New("no way to authenticate callers: give --api-keys, --jwt-hs256-secret-file, --jwt-jwks-file or --client-ca, or --allow-anonymous to serve everyone as --default-user"))
	}
	if c.Registry.Announcements && !strings.HasPrefix(c.Registry.AnnounceTopic, "persistent://") {
		errs = append(errs, fmt.Errorf("--announce-topic %q must be a persistent:// topic (announcements are read from its compacted view)", c.Registry.AnnounceTopic))
	}
	if c.Registry.Announce.ClaimGrace < 0 {
		errs = append(errs, fmt.Errorf("--announce-claim-grace %v: want 0 or more", c.Registry.Announce.ClaimGrace))
	}
	if c.Registry.Announcements {
		errs = append(errs, c.validateAnnounce()...)
	}
	if c.Registry.TrustGraph && c.Registry.TrustGraphWorkspace == "" {
		errs = append(errs, errors.New("--trustgraph-workspace must not be empty"))
	}
	if c.Registry.File == "" && !c.Registry.Announcements && !c.Registry.TrustGraph {
		errs = append(errs, errors.New("no registry source: give --registry (a JSON or YAML file with tool-service and tool sections), or turn on --announcements or --trustgraph-config"))
	} else if c.Registry.File == "" {
		// the other sources are enough
	} else if _, err := os.Stat(c.Registry.File); err != nil {
		errs = append(errs, fmt.Errorf("--registry: %w", err))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"default-timeout", c.Core.DefaultTimeout}, {"max-timeout", c.Core.MaxTimeout}, {"shutdown-grace", c.ShutdownGrace}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be a positive duration such as 30s", d.name))
		}
	}
	if c.Core.DefaultTimeout > c.Core.MaxTimeout && c.Core.MaxTimeout > 0 {
		errs = append(errs, errors.New("--default-timeout must not exceed --max-timeout"))
	}
	if c.Callers.KeyFile == "" && (c.Callers.PreviousKeyFile != "" || c.Callers.JWKSPublic) {
		errs = append(errs, errors.New("--caller-previous-key-file and --caller-jwks-public need --caller-key-file"))
	}
	if c.Callers.KeyFile != "" && c.Callers.Issuer == "" {
		errs = append(errs, errors.New("--caller-issuer must not be empty with --caller-key-file"))
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", c.Log.Format))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.Log.Level))
	}
	return errors.Join(errs...)
}

// validateOperations checks the settings of --operations: a key to protect
// the records with, and the topics.
func (c Config) validateOperations() []error {
	var errs []error
	if c.Operations.KeyFile == "" {
		errs = append(errs, errors.New("--operations needs --operations-key-file: the gateways encrypt and sign the operations' records with a key they share, and refuse records without it (make one with: openssl rand -base64 48 > operations.key)"))
	}
	for _, f := range []struct{ name, topic string }{
		{"operations-state-topic", c.Operations.Topics.State},
		{"operations-chunk-topic", c.Operations.Topics.Chunks},
		{"operations-reply-topic", c.Operations.Topics.Replies},
	} {
		if err := wire.ValidateTopic(f.topic); err != nil || !strings.HasPrefix(f.topic, "persistent://") {
			errs = append(errs, fmt.Errorf("--%s %q: want a persistent:// topic (tenant/namespace/name)", f.name, f.topic))
		}
	}
	// Services answer only within their response topic's namespace.
	if !wire.ReplyToAllowed(c.Operations.Topics.Replies, wire.ResponseTopic("any")) {
		errs = append(errs, fmt.Errorf("--operations-reply-topic %q: want a persistent topic of the response namespace (%s/%s), where tool services may answer",
			c.Operations.Topics.Replies, wire.Tenant, wire.ResponseNamespace))
	}
	if s := c.Operations.Topics; s.State == s.Chunks || s.State == s.Replies || s.Chunks == s.Replies {
		errs = append(errs, errors.New("--operations-state-topic, --operations-chunk-topic and --operations-reply-topic must be three different topics"))
	}
	return errs
}

// namespaceRE is a Pulsar tenant/namespace.
var namespaceRE = regexp.MustCompile(`^[A-Za-z0-9_.\-=]+/[A-Za-z0-9_.\-=]+$`)

// validateAnnounce checks the announced-topic namespaces: well formed,
// not empty, and never the namespace of the announcements themselves.
func (c Config) validateAnnounce() []error {
	var errs []error
	own := ""
	if _, rest, ok := strings.Cut(c.Registry.AnnounceTopic, "://"); ok {
		if i := strings.LastIndexByte(rest, '/'); i >= 0 {
			own = rest[:i]
		}
	}
	for _, f := range []struct {
		name string
		list []string
	}{{"announce-request-namespaces", c.Registry.Announce.RequestNamespaces}, {"announce-response-namespaces", c.Registry.Announce.ResponseNamespaces}} {
		if len(f.list) == 0 {
			errs = append(errs, fmt.Errorf("--%s must name at least one namespace (tenant/namespace)", f.name))
		}
		for _, ns := range f.list {
			switch {
			case !namespaceRE.MatchString(ns):
				errs = append(errs, fmt.Errorf("--%s %q: want tenant/namespace, such as tg/request", f.name, ns))
			case ns == own:
				errs = append(errs, fmt.Errorf("--%s %q: that is the namespace of --announce-topic; services must not be announced onto it", f.name, ns))
			}
		}
	}
	return errs
}

// instanceIDRE is what may end a Pulsar topic name.
var instanceIDRE = regexp.MustCompile(`^[A-Za-z0-9_.\-=]{1,200}$`)

// defaultInstanceID is the host name, cut to the characters a topic name
// may hold, and 6 random hex digits: replicas on one host, or restarts of
// one replica, never share a reply topic.
func defaultInstanceID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		case r == '.':
			return '-'
		}
		return -1
	}, host)
	if len(host) > 60 {
		host = host[:60]
	}
	if host == "" {
		host = "toolgate"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}
