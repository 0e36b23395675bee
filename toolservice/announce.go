package toolservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// DefaultAnnounceTopic is the topic gateways read announcements from: a
// persistent topic with compaction, one message per service keyed by its
// id, the latest of which counts (wire.DefaultAnnounceTopic).
const DefaultAnnounceTopic = wire.DefaultAnnounceTopic

// Announcement is what a service tells gateways about itself: its own
// descriptor (id and topics come from Config) and the tools it offers.
// A service with Config.Announce set announces it once it is subscribed,
// again on Announce, and withdraws it (an empty message with its key, a
// tombstone) when Run ends.
//
// Each Service announces as one instance of its service id: the message
// key is "<id>@<instance>" (wire.AnnounceKey, the instance in
// wire.PropInstance), so that gateways serve the service's tools while
// any of its replicas is there, and a replica that stops withdraws itself
// only. The announcement holds for its lease (wire.PropLease), which the
// service renews every third of it by announcing again; a replica that
// crashed stops renewing, and gateways let it go when the lease runs out.
//
// On the topic, an announcement is a registry file scoped to one service:
//
//	{"tool-service": {"<id>": {"id": "<id>", "request-queue": "…", "response-queue": "…", "config-params": [...]}},
//	 "tool": {"<key>": {"type": "tool-service", "name": "…", "service": "<id>", "arguments": [...]}}}
type Announcement struct {
	// Topic to announce on (default DefaultAnnounceTopic).
	Topic string
	// ConfigParams are the configuration parameters the service takes.
	ConfigParams []ConfigParam
	// Timeout is the service's default call deadline (0: the gateway's).
	Timeout time.Duration
	// Lease is how long gateways hold the announcement without a renewal
	// (default DefaultLease): after a crash the service's tools are listed
	// at most this long. The service renews it every Lease/3. Negative: no
	// lease — the announcement holds until withdrawn, even after a crash.
	Lease time.Duration
	// Tools the service offers.
	Tools []Tool
}

// ConfigParam is one configuration parameter of a service.
type ConfigParam struct {
	Name     string
	Required bool
}

// Tool describes one tool of an announced service.
type Tool struct {
	// Key of the descriptor (default: Name).
	Key         string
	Name        string
	Description string
	Arguments   []Argument
	// Strict tools reject arguments they do not declare.
	Strict bool
	// TaskSupport is "optional" or "required" when MCP clients that
	// negotiated the tasks extension may (or must) call the tool as a task
	// — a durable operation of a gateway run with --operations — instead
	// of waiting for its result; "" (the default) or "forbidden": never.
	TaskSupport string
	// Result is ResultMCPContent when the tool answers with MCP content
	// blocks (Content) and may send log records (Request.Log); "" (the
	// default) or "text": its output is text.
	Result string
	// Config holds the values of the service's config params that calls
	// to this tool carry.
	Config map[string]any
	// InputSchema, instead of Arguments, describes the arguments object
	// in full: a JSON Schema object (JSON Schema 2020-12 unless its
	// "$schema" names another draft) with "type": "object" at its root.
	// Gateways list it as it is, check every call's arguments against it,
	// and (MCP) ask clients to mirror the arguments whose properties carry
	// an "x-mcp-header" annotation into Mcp-Param-<name> request headers.
	// Set it or Arguments (and Strict), not both.
	InputSchema json.RawMessage
}

// Argument is one argument of a tool.
type Argument struct {
	Name        string
	Type        string // string, number, integer, boolean, object, array (default string)
	Description string
	Required    bool
}

// AnnouncementPayload is the message an announcement of service id with
// the given topics is made of.
func AnnouncementPayload(id, requestTopic, responseTopic string, a *Announcement) ([]byte, error) {
	if a == nil {
		return nil, errors.New("toolservice: nil announcement")
	}
	svc := map[string]any{"id": id, "request-queue": requestTopic, "response-queue": responseTopic}
	params := []any{}
	for _, p := range a.ConfigParams {
		params = append(params, map[string]any{"name": p.Name, "required": p.Required})
	}
	svc["config-params"] = params
	if a.Timeout > 0 {
		svc["timeout"] = a.Timeout.String()
	}
	tools := map[string]any{}
	for i, t := range a.Tools {
		key := t.Key
		if key == "" {
			key = t.Name
		}
		if key == "" {
			return nil, fmt.Errorf("toolservice: announced tool %d has no name", i)
		}
		if _, dup := tools[key]; dup {
			return nil, fmt.Errorf("toolservice: announced tool %q twice", key)
		}
		d := map[string]any{}
		for k, v := range t.Config {
			d[k] = v
		}
		d["type"] = "tool-service"
		d["name"] = t.Name
		if t.Name == "" {
			d["name"] = key
		}
		d["description"] = t.Description
		d["service"] = id
		if t.Strict {
			d["strict"] = true
		}
		if t.TaskSupport != "" {
			d["task-support"] = t.TaskSupport
		}
		if t.Result != "" {
			d["result"] = t.Result
		}
		if len(t.InputSchema) > 0 {
			if len(t.Arguments) > 0 || t.Strict {
				return nil, fmt.Errorf("toolservice: announced tool %q has both an input schema and arguments (or strict)", key)
			}
			if !json.Valid(t.InputSchema) {
				return nil, fmt.Errorf("toolservice: announced tool %q: the input schema is not valid JSON", key)
			}
			d["input-schema"] = t.InputSchema
			tools[key] = d
			continue
		}
		args := []any{}
		for _, arg := range t.Arguments {
			m := map[string]any{"name": arg.Name, "type": arg.Type, "description": arg.Description}
			if arg.Type == "" {
				m["type"] = "string"
			}
			if arg.Required {
				m["required"] = true
			}
			args = append(args, m)
		}
		d["arguments"] = args
		tools[key] = d
	}
	return json.Marshal(map[string]any{"tool-service": map[string]any{id: svc}, "tool": tools})
}

// DefaultLease is Announcement.Lease's default: a replica that crashed
// is let go by gateways at most this long after its last renewal.
const DefaultLease = 8 * time.Second

// lease is a's lease, 0 for none.
func (a *Announcement) lease() time.Duration {
	switch {
	case a.Lease < 0:
		return 0
	case a.Lease == 0:
		return DefaultLease
	}
	return a.Lease
}

// MaxAnnouncementBytes is the largest announcement a gateway reads; a
// larger one is refused before it is sent (scripts/pulsar.sh also bounds
// the announcements topic at the broker). It is wire.MaxAnnouncementBytes.
const MaxAnnouncementBytes = wire.MaxAnnouncementBytes

func (s *Service) announceTopic(a *Announcement) string {
	if a != nil && a.Topic != "" {
		return a.Topic
	}
	return DefaultAnnounceTopic
}

// Announce publishes the service's announcement: a, or when a is nil the
// one last announced (Config.Announce at first). It replaces what the
// service announced before. It fails when there is nothing to announce or
// the broker does not take the message.
func (s *Service) Announce(ctx context.Context, a *Announcement) error {
	s.announceMu.Lock()
	defer s.announceMu.Unlock()
	if a == nil {
		a = s.current
	}
	if a == nil {
		a = s.cfg.Announce
	}
	if a == nil {
		return errors.New("toolservice: no announcement (set Config.Announce or pass one)")
	}
	b, err := AnnouncementPayload(s.cfg.ID, s.reqTopic, s.respTopic, a)
	if err != nil {
		return err
	}
	if len(b) > MaxAnnouncementBytes {
		return fmt.Errorf("toolservice %s: the announcement is %d bytes, over the %d a gateway reads (and the broker's bound on the announcements topic): announce fewer or shorter tools", s.cfg.ID, len(b), MaxAnnouncementBytes)
	}
	topic := s.announceTopic(a)
	props := map[string]string{wire.PropInstance: s.instance}
	if l := a.lease(); l > 0 {
		props[wire.PropLease] = l.String()
	}
	msg := transport.Message{Key: wire.AnnounceKey(s.cfg.ID, s.instance), Payload: b, Properties: props}
	if err := s.broker.Publish(ctx, topic, msg); err != nil {
		return fmt.Errorf("toolservice %s: announce on %s: %w", s.cfg.ID, topic, err)
	}
	if !s.announced || s.current != a {
		s.log.Info("announced", "topic", topic, "tools", len(a.Tools), "instance", s.instance, "lease", a.lease())
	}
	s.current = a
	s.announced = true
	return nil
}

// Withdraw publishes a tombstone for this instance of the service (an
// empty message keyed as its announcements): gateways drop the instance,
// and the service's tools when no other instance is left. Run does this
// itself when it stops after announcing.
func (s *Service) Withdraw(ctx context.Context) error {
	s.announceMu.Lock()
	defer s.announceMu.Unlock()
	a := s.current
	if a == nil {
		a = s.cfg.Announce
	}
	topic := s.announceTopic(a)
	// The property keeps the empty message decodable when it travels
	// unbatched (pulsar-client-go drops an unbatched message that has
	// neither payload nor properties).
	tomb := transport.Message{Key: wire.AnnounceKey(s.cfg.ID, s.instance),
		Properties: map[string]string{wire.PropWithdrawn: "true", wire.PropInstance: s.instance}}
	if err := s.broker.Publish(ctx, topic, tomb); err != nil {
		return fmt.Errorf("toolservice %s: withdraw on %s: %w", s.cfg.ID, topic, err)
	}
	s.announced = false
	s.log.Info("withdrawn", "topic", topic, "instance", s.instance)
	return nil
}

// announceOnStart announces Config.Announce once Run has subscribed,
// retrying in the background while the broker refuses, then renews the
// announcement every third of its lease until ctx ends.
func (s *Service) announceOnStart(ctx context.Context) {
	if s.cfg.Announce == nil {
		return
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := s.Announce(actx, nil)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		s.log.Warn("cannot announce yet; retrying", "err", err)
	}
	s.announceWG.Add(1)
	go func() {
		defer s.announceWG.Done()
		s.keepAnnounced(ctx, err == nil)
	}()
}

// keepAnnounced announces until that succeeds (announced: it did), then
// renews the announcement every third of its lease, until ctx ends. A
// renewal that fails is tried again at the next; the lease leaves room
// for two to fail.
func (s *Service) keepAnnounced(ctx context.Context, announced bool) {
	backoff := time.Second
	for {
		wait := backoff
		if announced {
			s.announceMu.Lock()
			a := s.current
			s.announceMu.Unlock()
			if a == nil || a.lease() == 0 {
				return // nothing to renew
			}
			wait = a.lease() / 3
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.Announce(actx, nil)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			announced, backoff = true, time.Second
		case announced:
			s.slow.Warn("cannot renew the announcement; trying again", "err", err)
		default:
			backoff = min(2*backoff, 30*time.Second)
		}
	}
}

// withdrawOnStop withdraws what was announced, when Run ends gracefully,
// within 5 s and while ctx lasts.
func (s *Service) withdrawOnStop(ctx context.Context) {
	s.announceWG.Wait()
	s.announceMu.Lock()
	announced := s.announced
	s.announceMu.Unlock()
	if !announced {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Withdraw(ctx); err != nil {
		s.log.Warn("cannot withdraw the announcement; gateways keep listing the service until it is withdrawn", "err", err)
		return
	}
	// Still subscribed: calls gateways routed before they saw the
	// tombstone are served, not lost.
	time.Sleep(withdrawSettle)
}

// withdrawSettle is how long a stopping service keeps taking calls after
// it withdrew its announcement, for gateways to see the tombstone.
const withdrawSettle = 250 * time.Millisecond
