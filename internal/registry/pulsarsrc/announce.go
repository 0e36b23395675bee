// Package pulsarsrc holds the registry sources that read Apache Pulsar:
// the announcements of tool services (a compacted topic keyed by service
// id) and TrustGraph's config service (request/response and pushes). They
// report to a registry.Sink; the registry package itself knows nothing of
// Pulsar.
package pulsarsrc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/wire"
)

// DefaultAnnounceTopic is where tool services announce their descriptors
// (wire.DefaultAnnounceTopic).
const DefaultAnnounceTopic = wire.DefaultAnnounceTopic

// Announcements reads tool services' announcements: messages keyed by
// service id, or by "<service id>@<instance>" with the instance in the
// wire.PropInstance property (one replica of the service, its lease in
// wire.PropLease), whose payload is the registry file layout scoped to that
// service; an empty payload or a null value (Pulsar's tombstone) withdraws
// the service, or that instance of it. It reads the topic's compacted view from the earliest
// message, so a gateway started later sees every live service at once.
//
// The topic is written by anyone who may publish on it, so what it brings
// is bounded: the reader buffers few messages, an announcement larger than
// registry.DefaultMaxAnnouncementBytes is refused unread, and documents are
// parsed off the reader's goroutine, large ones in a lane of their own, so
// one large announcement never holds up the others. With a sink that keeps
// announced services (registry.AnnouncementSink, the gateway's merger), a
// renewal of an instance the registry holds is applied as it is read,
// other updates of what it holds are applied before any new service or
// instance, updates are applied in batches (one snapshot for all those
// waiting), and new services and instances are admitted at the pace of
// the source's Admission, the rest refused and counted: a flood of new
// service ids never unlists a live service. What is on the topic when the
// reader starts is applied in the log's order, in batches, before any of
// that; every update carries its message's time in the log (logTime),
// at which the registry takes its decisions.
type Announcements struct {
	client    pulsar.Client
	topic     string
	log       *slog.Logger
	admission Admission

	throttleMu   sync.Mutex
	throttled    int       // refused since the last line logged
	throttleLogd time.Time // when that line was logged
}

// AnnounceOption tunes an Announcements source.
type AnnounceOption func(*Announcements)

// WithAdmission sets how fast new services and instances are admitted
// (zero fields: the defaults, DefaultNewPerSecond, DefaultNewBurst,
// DefaultMaxWaiting).
func WithAdmission(a Admission) AnnounceOption {
	return func(s *Announcements) { s.admission = a }
}

// NewAnnouncements returns the source; topic "" is DefaultAnnounceTopic.
func NewAnnouncements(client pulsar.Client, topic string, log *slog.Logger, opts ...AnnounceOption) *Announcements {
	if topic == "" {
		topic = DefaultAnnounceTopic
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Announcements{client: client, topic: topic, log: log}
	for _, o := range opts {
		o(a)
	}
	a.admission = a.admission.withDefaults()
	return a
}

// Origin implements registry.Source.
func (a *Announcements) Origin() registry.Origin { return registry.OriginAnnouncement }

// Topic is the topic read.
func (a *Announcements) Topic() string { return a.topic }

// Run implements registry.Source. It reads until ctx ends; a reader that
// cannot be created (broker down, namespace missing) is retried, and the
// problem is reported to the sink meanwhile.
func (a *Announcements) Run(ctx context.Context, sink registry.Sink) error {
	d := newDispatcher(func(us []registry.Update) { a.applyBatch(sink, us) }, maxLargePending)
	d.adm = a.admission
	if as, ok := sink.(registry.AnnouncementSink); ok {
		d.renew, d.known = as.Renew, as.Known
		d.refuse = func(u registry.Update, err error) { a.throttle(as, u, err) }
	}
	defer d.close()
	defer context.AfterFunc(ctx, d.close)() // a reader waiting for room stops too
	backoff := 250 * time.Millisecond
	synced := false
	var last pulsar.MessageID // the last message applied: a new reader goes on after it
	for ctx.Err() == nil {
		err := a.read(ctx, sink, d, &synced, &last)
		if ctx.Err() != nil {
			return nil
		}
		sink.State(registry.OriginAnnouncement, false, fmt.Errorf("announcements on %s: %w", a.topic, err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

// Bounds on what the reader holds: messages buffered by the client, and
// bytes of large announcements waiting to be parsed.
const (
	readerQueue     = 16
	maxLargePending = 64 << 20
)

func (a *Announcements) read(ctx context.Context, sink registry.Sink, d *dispatcher, synced *bool, last *pulsar.MessageID) error {
	start := pulsar.EarliestMessageID()
	if *last != nil {
		// Read again, the log goes on where it was left: a message is
		// applied once, at its place.
		start = *last
	}
	r, err := a.client.CreateReader(pulsar.ReaderOptions{
		Topic:             a.topic,
		StartMessageID:    start,
		ReadCompacted:     true,
		Name:              "toolgate-registry",
		ReceiverQueueSize: readerQueue,
	})
	if err != nil {
		return err
	}
	defer r.Close()
	// Catch up with what is there, then say so. What was there is applied
	// in the log's order, in batches (one snapshot each), each message at
	// its time in the log: the registry is then the one gateways that read
	// it live hold. Admissions are counted from then on.
	d.idle() // what an earlier reader handed over goes first
	d.setLive(false)
	cu := catchUp{a: a, sink: sink}
	for r.HasNext() {
		msg, err := r.Next(ctx)
		if err != nil {
			cu.flush()
			return err
		}
		a.apply(sink, cu.add, msg)
		*last = msg.ID()
	}
	cu.flush()
	d.setLive(true)
	*synced = true
	sink.State(registry.OriginAnnouncement, true, nil)
	heard(sink, time.Now())
	a.log.Info("reading tool service announcements", "topic", a.topic)
	unreachable := false
	for {
		nctx, cancel := context.WithTimeout(ctx, quietCheck)
		msg, err := r.Next(nctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && errors.Is(err, context.DeadlineExceeded):
			// Quiet. The client reconnects on its own and Next says
			// nothing meanwhile: ask the broker, so that a gateway that
			// cannot hear renewals does not take their absence for the
			// instances' deaths (the merger holds the leases meanwhile).
			asked := time.Now()
			_, lerr := r.GetLastMessageID()
			switch {
			case lerr != nil && !unreachable:
				unreachable = true
				sink.State(registry.OriginAnnouncement, true, fmt.Errorf("announcements on %s: %w", a.topic, lerr))
			case lerr == nil && unreachable:
				unreachable = false
				sink.State(registry.OriginAnnouncement, true, nil)
			}
			if lerr == nil {
				heard(sink, asked) // everything published before was received
			}
			continue
		case err != nil:
			return err
		}
		if unreachable {
			unreachable = false
			sink.State(registry.OriginAnnouncement, true, nil)
		}
		a.apply(sink, func(u registry.Update) { d.submit(u) }, msg)
		*last = msg.ID()
	}
}

// catchUp applies what a reader catching up reads, in order, in batches
// of at most maxBatch updates and maxLargePending bytes.
type catchUp struct {
	a     *Announcements
	sink  registry.Sink
	us    []registry.Update
	bytes int
}

func (c *catchUp) add(u registry.Update) {
	c.us = append(c.us, u)
	c.bytes += len(u.Doc)
	if len(c.us) >= maxBatch || c.bytes >= maxLargePending {
		c.flush()
	}
}

func (c *catchUp) flush() {
	if len(c.us) > 0 {
		c.a.applyBatch(c.sink, c.us)
	}
	c.us, c.bytes = nil, 0
}

// quietCheck is how long the reader waits for an announcement before it
// asks the broker whether the topic is still reachable (and tells the sink
// it heard, when it is): the merger lets leases run out only while the
// announcements are known to be readable.
var quietCheck = time.Second

// heard tells sink, when it keeps leases (registry.Merger), that the
// announcements were readable at at.
func heard(sink registry.Sink, at time.Time) {
	if h, ok := sink.(interface {
		Heard(registry.Origin, time.Time)
	}); ok {
		h.Heard(registry.OriginAnnouncement, at)
	}
}

// apply hands one message over to submit (the dispatcher, or the batch of
// a reader catching up). What the sink refuses without parsing (no key,
// too large, a bad instance or lease) is refused here, on the reader's
// goroutine. Every update carries the message's publish time (At): the
// registry takes its decisions at the log's times, not at the time a
// message happens to be applied.
func (a *Announcements) apply(sink registry.Sink, submit func(registry.Update), msg pulsar.Message) {
	key := msg.Key()
	props := msg.Properties()
	withdrawal := msg.IsNullValue() || len(msg.Payload()) == 0
	unit, inst, ok := wire.SplitAnnounceKey(key, props[wire.PropInstance], withdrawal)
	if !ok {
		// Reported through the sink as a rejection, like any bad announcement.
		_ = sink.Apply(registry.Update{Origin: registry.OriginAnnouncement, Name: a.topic, Doc: []byte("{}")})
		if key != "" {
			a.log.Warn("announcement refused: its key is not <service id>@<instance> of its "+wire.PropInstance+" property", "key", key, "instance", props[wire.PropInstance])
		}
		return
	}
	u := registry.Update{Origin: registry.OriginAnnouncement, Unit: unit, Instance: inst, Name: a.topic, Doc: msg.Payload(), At: logTime(msg)}
	if inst != "" {
		if err := wire.ValidateInstanceID(inst); err != nil {
			a.applyNow(sink, registry.Update{Origin: registry.OriginAnnouncement, Unit: unit, Name: a.topic, Doc: []byte("{}")})
			a.log.Warn("announcement refused", "key", key, "err", err)
			return
		}
	}
	if withdrawal {
		u.Doc = nil // the instance (or service) withdraws
		if props[wire.PropInstance] == "" && inst != "" {
			// A bare tombstone of "x@y": instance y of x, or a service
			// announced as a whole under the id "x@y" — withdraw both.
			submit(registry.Update{Origin: registry.OriginAnnouncement, Unit: key, Name: a.topic, At: u.At})
		}
		submit(u)
		return
	}
	if l := props[wire.PropLease]; l != "" {
		lease, err := time.ParseDuration(l)
		if err != nil || lease <= 0 {
			_ = sink.Apply(registry.Update{Origin: registry.OriginAnnouncement, Name: a.topic, Doc: []byte("{}")})
			a.log.Warn("announcement refused: its lease is not a positive duration", "key", key, "lease", l)
			return
		}
		u.Lease = lease
	}
	if len(u.Doc) > registry.DefaultMaxAnnouncementBytes {
		a.applyNow(sink, u)
		return
	}
	submit(u)
}

// logTime is a message's time in the announcements' log: the broker's
// timestamp when the broker adds one (AppendBrokerTimestampMetadataInterceptor:
// one clock for every announcer), else its publish time.
func logTime(msg pulsar.Message) time.Time {
	if bt := msg.BrokerPublishTime(); bt != nil && !bt.IsZero() {
		return *bt
	}
	return msg.PublishTime()
}

// applyBatch applies what the dispatcher took, in one batch when the sink
// takes batches.
func (a *Announcements) applyBatch(sink registry.Sink, us []registry.Update) {
	as, ok := sink.(registry.AnnouncementSink)
	if !ok {
		for _, u := range us {
			a.applyNow(sink, u)
		}
		return
	}
	for i, err := range as.ApplyBatch(us) {
		if err != nil && !errors.Is(err, registry.ErrRejected) {
			a.log.Warn("announcement not applied", "service", us[i].Unit, "instance", us[i].Instance, "err", err)
		}
	}
}

// throttleLogEvery is how often, at most, refusals of new services are
// logged while a flood lasts: one line with their number.
const throttleLogEvery = 10 * time.Second

// throttle counts an announcement of a new service or instance refused
// for want of room, and logs the refusals at most every throttleLogEvery.
func (a *Announcements) throttle(sink registry.AnnouncementSink, u registry.Update, err error) {
	sink.Throttle(registry.OriginAnnouncement, 1, fmt.Errorf("%w: announcement %s: %w", registry.ErrRejected, u.Unit, err))
	a.throttleMu.Lock()
	defer a.throttleMu.Unlock()
	a.throttled++
	if now := time.Now(); now.Sub(a.throttleLogd) >= throttleLogEvery {
		a.log.Warn("announcements of new services or instances refused: more came at once than are admitted; a service that renews is admitted at a later renewal",
			"refused", a.throttled, "admitted_per_second", a.admission.PerSecond, "waiting_at_most", a.admission.Waiting,
			"last_service", u.Unit, "last_instance", u.Instance, "reason", err)
		a.throttled, a.throttleLogd = 0, now
	}
}

func (a *Announcements) applyNow(sink registry.Sink, u registry.Update) {
	err := sink.Apply(u)
	if err != nil && !errors.Is(err, registry.ErrRejected) {
		a.log.Warn("announcement not applied", "service", u.Unit, "instance", u.Instance, "err", err)
	}
}
