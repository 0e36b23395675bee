package pulsarsrc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/registry"
)

// TrustGraph's config service topics (its system queue and push topic).
const (
	ConfigRequestTopic  = "non-persistent://tg/request/config"
	ConfigResponseTopic = "non-persistent://tg/response/config"
	ConfigPushTopic     = "non-persistent://tg/notify/config"
)

// DefaultWorkspace is the TrustGraph config workspace read unless
// ConfigOptions.Workspace names another.
const DefaultWorkspace = "default"

// ConfigOptions configure a ConfigService source.
type ConfigOptions struct {
	// Workspace holding the descriptors (default DefaultWorkspace).
	Workspace string
	// Topics (defaults: the Config*Topic constants).
	RequestTopic, ResponseTopic, PushTopic string
	// RequestTimeout bounds one request (default 5 s); Resync re-reads
	// everything this often even without a push (default 1 min), since
	// pushes missed while disconnected are lost.
	RequestTimeout time.Duration
	Resync         time.Duration
	Logger         *slog.Logger
}

// ConfigService reads the "tool-service", "tool" and "tool-set" types of one workspace
// from TrustGraph's config service and reads them again on its pushes.
// Each value is the JSON text of one descriptor keyed by id, as the
// registry file's sections hold them.
type ConfigService struct {
	client pulsar.Client
	opts   ConfigOptions
	log    *slog.Logger

	mu      sync.Mutex
	waiting map[string]chan configResponse
}

// NewConfigService returns the source.
func NewConfigService(client pulsar.Client, opts ConfigOptions) *ConfigService {
	if opts.Workspace == "" {
		opts.Workspace = DefaultWorkspace
	}
	if opts.RequestTopic == "" {
		opts.RequestTopic = ConfigRequestTopic
	}
	if opts.ResponseTopic == "" {
		opts.ResponseTopic = ConfigResponseTopic
	}
	if opts.PushTopic == "" {
		opts.PushTopic = ConfigPushTopic
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 5 * time.Second
	}
	if opts.Resync <= 0 {
		opts.Resync = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &ConfigService{client: client, opts: opts, log: opts.Logger, waiting: map[string]chan configResponse{}}
}

// Origin implements registry.Source.
func (c *ConfigService) Origin() registry.Origin { return registry.OriginConfigService }

// configRequest is the config service's request body.
type configRequest struct {
	Operation string      `json:"operation"`
	Workspace string      `json:"workspace"`
	Keys      []configKey `json:"keys"`
	Type      string      `json:"type"`
	Values    []configVal `json:"values"`
}

type configKey struct {
	Type string `json:"type"`
	Key  string `json:"key"`
}

type configVal struct {
	Type      string  `json:"type"`
	Key       string  `json:"key"`
	Value     *string `json:"value"`
	Workspace string  `json:"workspace,omitempty"`
}

type configResponse struct {
	Version int64       `json:"version"`
	Values  []configVal `json:"values"`
	Error   *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type configPush struct {
	Version int64               `json:"version"`
	Changes map[string][]string `json:"changes"`
}

// Run implements registry.Source: subscribe to pushes and replies, read
// everything, then read again on every relevant push, until ctx ends.
func (c *ConfigService) Run(ctx context.Context, sink registry.Sink) error {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		err := c.session(ctx, sink)
		if ctx.Err() != nil {
			return nil
		}
		sink.State(registry.OriginConfigService, false, fmt.Errorf("config service: %w", err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

func subName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// session runs until a request fails for good or ctx ends.
func (c *ConfigService) session(ctx context.Context, sink registry.Sink) error {
	gone := closeWatch{make(chan error, 1)}
	pushes := make(chan pulsar.ConsumerMessage, 64)
	// Pushes first: one that arrives while we read is not lost.
	push, err := c.client.Subscribe(pulsar.ConsumerOptions{Topic: c.opts.PushTopic, SubscriptionName: subName("toolgate-push-"),
		Type: pulsar.Exclusive, SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest, MessageChannel: pushes,
		Interceptors: pulsar.ConsumerInterceptors{gone}})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", c.opts.PushTopic, err)
	}
	defer push.Close()
	replies := make(chan pulsar.ConsumerMessage, 64)
	resp, err := c.client.Subscribe(pulsar.ConsumerOptions{Topic: c.opts.ResponseTopic, SubscriptionName: subName("toolgate-rr-"),
		Type: pulsar.Exclusive, SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest, MessageChannel: replies,
		Interceptors: pulsar.ConsumerInterceptors{gone}})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", c.opts.ResponseTopic, err)
	}
	defer resp.Close()
	prod, err := c.client.CreateProducer(pulsar.ProducerOptions{Topic: c.opts.RequestTopic, DisableBatching: true})
	if err != nil {
		return fmt.Errorf("producer %s: %w", c.opts.RequestTopic, err)
	}
	defer prod.Close()

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go c.route(sctx, replies)

	var version int64 = -1
	read := func() error {
		v, err := c.readAll(sctx, prod, sink)
		if err != nil {
			return err
		}
		version = v
		sink.State(registry.OriginConfigService, true, nil)
		return nil
	}
	// The first read is retried here: requests sent before config-svc
	// subscribed are lost without an answer.
	if err := read(); err != nil {
		return err
	}
	c.log.Info("reading TrustGraph's config service", "workspace", c.opts.Workspace, "version", version)
	resync := time.NewTicker(c.opts.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-gone.ch:
			return fmt.Errorf("consumer closed by the client: %w", err)
		case <-resync.C:
			if err := read(); err != nil {
				return err
			}
		case m, ok := <-pushes:
			if !ok {
				return errors.New("push subscription closed")
			}
			var p configPush
			if err := json.Unmarshal(m.Payload(), &p); err != nil {
				c.log.Warn("config push that is not JSON", "err", err)
				continue
			}
			if p.Version <= version || !c.relevant(p) {
				continue
			}
			if err := read(); err != nil {
				return err
			}
		}
	}
}

// closeWatch reports a consumer that the client closed for good (as
// pulsar-client-go does on a non-retriable error when it reconnects:
// TopicNotFound, ConsumerBusy, …); the session then starts again.
type closeWatch struct{ ch chan error }

func (closeWatch) BeforeConsume(pulsar.ConsumerMessage)                   {}
func (closeWatch) OnAcknowledge(pulsar.Consumer, pulsar.MessageID)        {}
func (closeWatch) OnNegativeAcksSend(pulsar.Consumer, []pulsar.MessageID) {}

// OnConsumerClose implements pulsar.ConsumerCloseInterceptor; err is nil
// when we closed it ourselves.
func (w closeWatch) OnConsumerClose(_ pulsar.Consumer, err error) {
	if err != nil {
		select {
		case w.ch <- err:
		default:
		}
	}
}

// relevant: a push that names our types in our workspace, or a poke
// (no changes listed: anything may have changed).
func (c *ConfigService) relevant(p configPush) bool {
	if len(p.Changes) == 0 {
		return true
	}
	for _, typ := range []string{"tool-service", "tool", "tool-set"} {
		for _, ws := range p.Changes[typ] {
			if ws == c.opts.Workspace {
				return true
			}
		}
	}
	return false
}

// route hands each reply to the request waiting for its id; replies to
// other clients' requests are dropped.
func (c *ConfigService) route(ctx context.Context, replies <-chan pulsar.ConsumerMessage) {
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-replies:
			if !ok {
				return
			}
			id := m.Properties()["id"]
			c.mu.Lock()
			ch := c.waiting[id]
			delete(c.waiting, id)
			c.mu.Unlock()
			if ch == nil {
				continue
			}
			var r configResponse
			if err := json.Unmarshal(m.Payload(), &r); err != nil {
				msg := "reply is not JSON: " + err.Error()
				r.Error = &struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				}{"bad-reply", msg}
			}
			ch <- r
		}
	}
}

// request sends one request and waits for its reply, trying again (up to
// 3 times) when none comes within RequestTimeout.
func (c *ConfigService) request(ctx context.Context, prod pulsar.Producer, req configRequest) (configResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return configResponse{}, err
	}
	var last error
	for range 3 {
		id := subName("toolgate-")
		ch := make(chan configResponse, 1)
		c.mu.Lock()
		c.waiting[id] = ch
		c.mu.Unlock()
		t := time.NewTimer(c.opts.RequestTimeout)
		_, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: body, Properties: map[string]string{"id": id}})
		if err == nil {
			select {
			case r := <-ch:
				t.Stop()
				if r.Error != nil {
					return r, fmt.Errorf("%s %s: %s: %s", req.Operation, req.Type, r.Error.Type, r.Error.Message)
				}
				return r, nil
			case <-ctx.Done():
				err = ctx.Err()
			case <-t.C:
				err = fmt.Errorf("%s %s: no reply within %s (is config-svc running?)", req.Operation, req.Type, c.opts.RequestTimeout)
			}
		}
		t.Stop()
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
		if ctx.Err() != nil {
			return configResponse{}, ctx.Err()
		}
		last = err
	}
	return configResponse{}, last
}

// readAll reads both types (again, if the version moved between the two
// reads) and hands them to the sink as one document.
func (c *ConfigService) readAll(ctx context.Context, prod pulsar.Producer, sink registry.Sink) (int64, error) {
	for attempt := 0; ; attempt++ {
		doc := map[string]any{}
		versions := map[int64]bool{}
		for _, typ := range []string{"tool-service", "tool", "tool-set"} {
			r, err := c.request(ctx, prod, configRequest{Operation: "getvalues", Workspace: c.opts.Workspace, Type: typ,
				Keys: []configKey{}, Values: []configVal{}})
			if err != nil {
				return 0, err
			}
			versions[r.Version] = true
			sec := map[string]any{}
			for _, v := range r.Values {
				if v.Value != nil {
					sec[v.Key] = *v.Value
				}
			}
			doc[typ] = sec
		}
		if len(versions) > 1 && attempt < 3 {
			continue // something changed between the two reads
		}
		var version int64
		for v := range versions {
			version = max(version, v)
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return 0, err
		}
		// Invalid values are reported by the sink and left out; the rest is
		// applied.
		_ = sink.Apply(registry.Update{Origin: registry.OriginConfigService, Name: "workspace " + c.opts.Workspace, Doc: b})
		return version, nil
	}
}
