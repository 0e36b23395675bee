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
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/registry"
)

// DefaultAnnounceTopic is where tool services announce their descriptors.
const DefaultAnnounceTopic = "persistent://tg/config/tool-descriptors"

// Announcements reads tool services' announcements: messages keyed by
// service id whose payload is the registry file layout scoped to that
// service; an empty payload or a null value (Pulsar's tombstone) withdraws
// the service. It reads the topic's compacted view from the earliest
// message, so a gateway started later sees every live service at once.
//
// The topic is written by anyone who may publish on it, so what it brings
// is bounded: the reader buffers few messages, an announcement larger than
// registry.DefaultMaxAnnouncementBytes is refused unread, and documents are
// parsed off the reader's goroutine, large ones in a lane of their own, so
// one large announcement never holds up the others.
type Announcements struct {
	client pulsar.Client
	topic  string
	log    *slog.Logger
}

// NewAnnouncements returns the source; topic "" is DefaultAnnounceTopic.
func NewAnnouncements(client pulsar.Client, topic string, log *slog.Logger) *Announcements {
	if topic == "" {
		topic = DefaultAnnounceTopic
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Announcements{client: client, topic: topic, log: log}
}

// Origin implements registry.Source.
func (a *Announcements) Origin() registry.Origin { return registry.OriginAnnouncement }

// Topic is the topic read.
func (a *Announcements) Topic() string { return a.topic }

// Run implements registry.Source. It reads until ctx ends; a reader that
// cannot be created (broker down, namespace missing) is retried, and the
// problem is reported to the sink meanwhile.
func (a *Announcements) Run(ctx context.Context, sink registry.Sink) error {
	d := newDispatcher(func(u registry.Update) { a.applyNow(sink, u) }, maxLargePending)
	defer d.close()
	backoff := 250 * time.Millisecond
	synced := false
	for ctx.Err() == nil {
		err := a.read(ctx, sink, d, &synced)
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

func (a *Announcements) read(ctx context.Context, sink registry.Sink, d *dispatcher, synced *bool) error {
	r, err := a.client.CreateReader(pulsar.ReaderOptions{
		Topic:             a.topic,
		StartMessageID:    pulsar.EarliestMessageID(),
		ReadCompacted:     true,
		Name:              "toolgate-registry",
		ReceiverQueueSize: readerQueue,
	})
	if err != nil {
		return err
	}
	defer r.Close()
	// Catch up with what is there, then say so.
	for r.HasNext() {
		msg, err := r.Next(ctx)
		if err != nil {
			return err
		}
		a.apply(sink, d, msg)
	}
	d.idle()
	*synced = true
	sink.State(registry.OriginAnnouncement, true, nil)
	a.log.Info("reading tool service announcements", "topic", a.topic)
	for {
		msg, err := r.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		a.apply(sink, d, msg)
	}
}

// apply hands one message to the dispatcher. What the sink refuses without
// parsing (no key, too large) is refused here, on the reader's goroutine.
func (a *Announcements) apply(sink registry.Sink, d *dispatcher, msg pulsar.Message) {
	key := msg.Key()
	if key == "" {
		// Reported through the sink as a rejection, like any bad announcement.
		_ = sink.Apply(registry.Update{Origin: registry.OriginAnnouncement, Name: a.topic, Doc: []byte("{}")})
		return
	}
	u := registry.Update{Origin: registry.OriginAnnouncement, Unit: key, Name: a.topic, Doc: msg.Payload()}
	if msg.IsNullValue() {
		u.Doc = nil // a tombstone: the service withdraws
	}
	if len(u.Doc) > registry.DefaultMaxAnnouncementBytes {
		a.applyNow(sink, u)
		return
	}
	d.submit(u)
}

func (a *Announcements) applyNow(sink registry.Sink, u registry.Update) {
	err := sink.Apply(u)
	if err != nil && !errors.Is(err, registry.ErrRejected) {
		a.log.Warn("announcement not applied", "service", u.Unit, "err", err)
	}
}
