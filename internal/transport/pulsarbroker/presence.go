package pulsarbroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
)

// AdminPresence answers whether a topic has consumers, from the Pulsar admin
// API's topic stats, cached briefly: a positive answer for PositiveTTL, a
// negative one for NegativeTTL (short, so a service that just started is
// seen quickly). Only a topic's first question waits for the admin API;
// after that an answer past its TTL is given as it is while one request in
// the background refreshes it, so calls never queue behind the admin API.
type AdminPresence struct {
	bases       []string     // admin API URLs, tried in turn
	next        atomic.Int32 // the index in bases asked first: the last that answered
	client      *http.Client
	log         *slog.Logger
	PositiveTTL time.Duration
	NegativeTTL time.Duration
	// TokenFile, when set, holds the token (the gateway's, as its Pulsar
	// client uses it) sent as a bearer token to an authenticating broker;
	// it is read again for every request the cache lets through.
	TokenFile string

	entries sync.Map // topic → *presenceEntry
}

type presenceEntry struct {
	answer     atomic.Pointer[presenceAnswer] // nil until the first check
	refreshing atomic.Bool
	first      sync.Mutex // the first check: one request for all who wait
}

type presenceAnswer struct {
	present bool
	checked time.Time
}

// NewAdminPresence returns a checker for the admin API at adminURL
// (e.g. http://127.0.0.1:8080). On a cluster adminURL may list several
// brokers' admin APIs, separated by commas (http://b1:8080,http://b2:8080):
// a question goes to the one that answered last, and to the next when it
// cannot be reached or fails with a server error (any broker answers for
// any topic, redirecting to its owner).
func NewAdminPresence(adminURL string, log *slog.Logger) *AdminPresence {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var bases []string
	for u := range strings.SplitSeq(adminURL, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			bases = append(bases, u)
		}
	}
	return &AdminPresence{
		bases:       bases,
		client:      &http.Client{Timeout: 2 * time.Second, CheckRedirect: keepBearer},
		log:         log,
		PositiveTTL: 2 * time.Second,
		NegativeTTL: 500 * time.Millisecond,
	}
}

// Subscribed reports whether topic has at least one consumer. When the admin
// API cannot answer it returns the error; callers should then assume yes.
func (a *AdminPresence) Subscribed(ctx context.Context, topic string) (bool, error) {
	v, ok := a.entries.Load(topic)
	if !ok {
		v, _ = a.entries.LoadOrStore(topic, &presenceEntry{})
	}
	e := v.(*presenceEntry)
	ans := e.answer.Load()
	if ans == nil {
		e.first.Lock()
		defer e.first.Unlock()
		if ans = e.answer.Load(); ans == nil {
			return a.check(ctx, e, topic)
		}
	}
	ttl := a.NegativeTTL
	if ans.present {
		ttl = a.PositiveTTL
	}
	if time.Since(ans.checked) >= ttl && e.refreshing.CompareAndSwap(false, true) {
		go func() {
			defer e.refreshing.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), a.client.Timeout)
			defer cancel()
			if _, err := a.check(ctx, e, topic); err != nil {
				a.log.Debug("cannot refresh whether the topic has subscribers", "topic", topic, "err", err)
			}
		}()
	}
	return ans.present, nil
}

// check asks the admin API and keeps the answer. When it cannot answer,
// "yes" is kept as the answer (for PositiveTTL): calls go ahead, and the
// admin API is asked again later, not by every call.
func (a *AdminPresence) check(ctx context.Context, e *presenceEntry, topic string) (bool, error) {
	ids, err := a.consumers(ctx, topic)
	if err != nil {
		e.answer.Store(&presenceAnswer{present: true, checked: time.Now()})
		return true, err
	}
	e.answer.Store(&presenceAnswer{present: len(ids) > 0, checked: time.Now()})
	return len(ids) > 0, nil
}

// Consumers asks the admin API now (no cache) which consumers topic has,
// and returns one identity per consumer: its name, address and the time
// it connected, so that a consumer that went away and one that took its
// place differ. The answer also refreshes what Subscribed answers.
func (a *AdminPresence) Consumers(ctx context.Context, topic string) ([]transport.Consumer, error) {
	ids, err := a.consumers(ctx, topic)
	if err != nil {
		return nil, err
	}
	v, _ := a.entries.LoadOrStore(topic, &presenceEntry{})
	v.(*presenceEntry).answer.Store(&presenceAnswer{present: len(ids) > 0, checked: time.Now()})
	return ids, nil
}

// keepBearer follows a broker's redirect to the broker that owns a topic
// with the bearer token of the first request: net/http drops the
// Authorization header when a redirect changes host, and the owner would
// then refuse the question.
func keepBearer(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if auth := via[0].Header.Get("Authorization"); auth != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", auth)
	}
	return nil
}

func (a *AdminPresence) consumers(ctx context.Context, topic string) ([]transport.Consumer, error) {
	st, err := a.topicStats(ctx, topic)
	if err != nil || st == nil {
		return nil, err
	}
	var cs []transport.Consumer
	for sub, s := range st.Subscriptions {
		for _, c := range s.Consumers {
			since, _ := time.Parse(time.RFC3339Nano, c.ConnectedSince)
			id := sub + "/" + c.Name + "@" + c.Address + "@" + c.ConnectedSince
			if c.partition != "" {
				id += "#" + c.partition // one consumer of the client per partition
			}
			cs = append(cs, transport.Consumer{ID: id, Name: sub + "/" + c.Name, Since: since})
		}
	}
	return cs, nil
}

// stats is what the watch reads of a topic's stats.
type stats struct {
	In            int64                        `json:"msgInCounter"`
	Subscriptions map[string]subscriptionStats `json:"subscriptions"`
}

type subscriptionStats struct {
	Out       int64           `json:"msgOutCounter"`
	Consumers []consumerStats `json:"consumers"`
}

type consumerStats struct {
	Name           string `json:"consumerName"`
	Address        string `json:"address"`
	ConnectedSince string `json:"connectedSince"`
	partition      string // the partition it reads, of a partitioned topic
}

// partitionedStats is what the watch reads of a partitioned topic's stats,
// asked per partition.
type partitionedStats struct {
	Partitions map[string]stats `json:"partitions"`
}

// merge is the stats of the partitions together: messages in and out
// summed, every partition's consumers listed.
func (p *partitionedStats) merge() *stats {
	out := &stats{Subscriptions: map[string]subscriptionStats{}}
	// In the partitions' order: what is read of the consumers (Delivery's
	// Lifetime) is the same from one question to the next.
	names := make([]string, 0, len(p.Partitions))
	for name := range p.Partitions {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ps := p.Partitions[name]
		out.In += ps.In
		for sub, s := range ps.Subscriptions {
			o := out.Subscriptions[sub]
			o.Out += s.Out
			for _, c := range s.Consumers {
				c.partition = name[strings.LastIndexByte(name, '-')+1:]
				o.Consumers = append(o.Consumers, c)
			}
			out.Subscriptions[sub] = o
		}
	}
	return out
}

// topicStats asks the admin APIs, in turn, for topic's stats: nil when the
// topic does not exist. A partitioned topic (whose own name has no stats)
// is answered with its partitions' stats together.
func (a *AdminPresence) topicStats(ctx context.Context, topic string) (*stats, error) {
	scheme, rest, ok := strings.Cut(topic, "://")
	if !ok {
		return nil, fmt.Errorf("topic %q has no scheme", topic)
	}
	if len(a.bases) == 0 {
		return nil, fmt.Errorf("no admin API URL")
	}
	first := int(a.next.Load())
	var errs []error
	for i := range a.bases {
		k := (first + i) % len(a.bases)
		path := a.bases[k] + "/admin/v2/" + scheme + "/" + rest
		st := &stats{}
		found, retry, err := a.get(ctx, path+"/stats", topic, st)
		if err == nil && !found {
			// No such topic, or a partitioned one.
			ps := &partitionedStats{}
			found, retry, err = a.get(ctx, path+"/partitioned-stats?perPartition=true", topic, ps)
			if found && len(ps.Partitions) > 0 {
				st = ps.merge()
			} else {
				found = false
			}
		}
		if err == nil {
			a.next.Store(int32(k))
			if !found {
				return nil, nil
			}
			return st, nil
		}
		errs = append(errs, err)
		if !retry || ctx.Err() != nil {
			if retry {
				a.next.Store(int32((k + 1) % len(a.bases))) // the next question starts at another
			}
			break
		}
	}
	return nil, errors.Join(errs...)
}

// get asks one admin API for url and decodes the answer into v; found is
// false when the admin API says there is no such topic, retry whether
// another broker's admin API might answer instead.
func (a *AdminPresence) get(ctx context.Context, url, topic string, v any) (found, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, false, err
	}
	if a.TokenFile != "" {
		tok, err := os.ReadFile(a.TokenFile)
		if err != nil {
			return false, false, fmt.Errorf("the admin API's token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return false, true, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return false, false, nil // the topic does not exist: nobody ever attached
	default:
		return false, resp.StatusCode >= 500, fmt.Errorf("topic stats of %s: %s", topic, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatsBytes)).Decode(v); err != nil {
		return false, false, fmt.Errorf("topic stats of %s: %w", topic, err)
	}
	return true, false, nil
}

// maxStatsBytes bounds a topic-stats answer read (a topic with thousands of
// consumers is a few hundred kilobytes).
const maxStatsBytes = 16 << 20

// Delivery asks the admin API now how many messages topic has taken in
// all and how many the broker has sent to subscription. Within one
// lifetime of the subscription, on a non-persistent topic, the difference
// grows by each message the broker dropped for the subscription (its
// consumer could not take it), and by the messages in flight at the
// moment asked, which it then catches up with.
func (a *AdminPresence) Delivery(ctx context.Context, topic, subscription string) (transport.Delivery, error) {
	st, err := a.topicStats(ctx, topic)
	if err != nil {
		return transport.Delivery{}, err
	}
	if st == nil {
		return transport.Delivery{}, fmt.Errorf("topic stats of %s: no such topic", topic)
	}
	s, ok := st.Subscriptions[subscription]
	if !ok {
		return transport.Delivery{}, fmt.Errorf("topic stats of %s: no subscription %q", topic, subscription)
	}
	d := transport.Delivery{In: st.In, Out: s.Out}
	for i, c := range s.Consumers {
		if c.ConnectedSince == "" {
			return transport.Delivery{In: st.In, Out: s.Out}, nil // lives cannot be told apart
		}
		if i > 0 {
			d.Lifetime += ","
		}
		d.Lifetime += c.Name + "@" + c.Address + "@" + c.ConnectedSince
	}
	return d, nil
}
