package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// AdminPresence answers whether a topic has consumers, from the Pulsar admin
// API's topic stats, cached briefly: a positive answer for PositiveTTL, a
// negative one for NegativeTTL (short, so a service that just started is
// seen quickly). Concurrent askers share one request per topic.
type AdminPresence struct {
	base        string
	client      *http.Client
	log         *slog.Logger
	PositiveTTL time.Duration
	NegativeTTL time.Duration

	entries sync.Map // topic → *presenceEntry
}

type presenceEntry struct {
	mu      sync.Mutex
	checked time.Time
	present bool
}

// NewAdminPresence returns a checker for the admin API at adminURL
// (e.g. http://127.0.0.1:8080).
func NewAdminPresence(adminURL string, log *slog.Logger) *AdminPresence {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &AdminPresence{
		base:        strings.TrimRight(adminURL, "/"),
		client:      &http.Client{Timeout: 2 * time.Second},
		log:         log,
		PositiveTTL: 2 * time.Second,
		NegativeTTL: 500 * time.Millisecond,
	}
}

// Subscribed reports whether topic has at least one consumer. When the admin
// API cannot answer it returns the error; callers should then assume yes.
func (a *AdminPresence) Subscribed(ctx context.Context, topic string) (bool, error) {
	v, _ := a.entries.Load(topic)
	e, _ := v.(*presenceEntry)
	if e == nil {
		v, _ = a.entries.LoadOrStore(topic, &presenceEntry{})
		e = v.(*presenceEntry)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ttl := a.NegativeTTL
	if e.present {
		ttl = a.PositiveTTL
	}
	if !e.checked.IsZero() && time.Since(e.checked) < ttl {
		return e.present, nil
	}
	n, err := a.consumers(ctx, topic)
	if err != nil {
		return true, err
	}
	e.present, e.checked = n > 0, time.Now()
	return e.present, nil
}

func (a *AdminPresence) consumers(ctx context.Context, topic string) (int, error) {
	scheme, rest, ok := strings.Cut(topic, "://")
	if !ok {
		return 0, fmt.Errorf("topic %q has no scheme", topic)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/admin/v2/"+scheme+"/"+rest+"/stats", nil)
	if err != nil {
		return 0, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return 0, nil // the topic does not exist: nobody ever attached
	default:
		return 0, fmt.Errorf("topic stats of %s: %s", topic, resp.Status)
	}
	var st struct {
		Subscriptions map[string]struct {
			Consumers []json.RawMessage `json:"consumers"`
		} `json:"subscriptions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, fmt.Errorf("topic stats of %s: %w", topic, err)
	}
	n := 0
	for _, s := range st.Subscriptions {
		n += len(s.Consumers)
	}
	return n, nil
}
