package pulsarsrc

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/registry"
)

// subscriptionsOf lists a topic's subscription names from the admin API.
func subscriptionsOf(t *testing.T, topic string) []string {
	t.Helper()
	scheme, rest, _ := strings.Cut(topic, "://")
	resp, err := http.Get(brokertest.AdminURL() + "/admin/v2/" + scheme + "/" + rest + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Subscriptions map[string]json.RawMessage `json:"subscriptions"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&st)
	var out []string
	for name := range st.Subscriptions {
		out = append(out, name)
	}
	return out
}

// When the client closes the push consumer for good (here: the topic is
// unloaded and another consumer takes the exclusive subscription while ours
// reconnects, so the broker answers ConsumerBusy), the session starts
// again — it reads everything afresh and subscribes anew — instead of
// waiting for pushes that never come until the next resync.
func TestConfigServiceStartsAgainWhenAConsumerIsClosed(t *testing.T) {
	c := client(t)
	base := brokertest.UniqueTopic("config")
	req, resp, push := "non-persistent://tg/request/"+base, "non-persistent://tg/response/"+base, "non-persistent://tg/notify/"+base
	r := startResponder(t, c, req, resp, push)
	sink := &recorder{Merger: registry.NewMerger(nil, nil)}
	src := NewConfigService(c, ConfigOptions{RequestTopic: req, ResponseTopic: resp, PushTopic: push, RequestTimeout: time.Second, Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("source: %v", err)
		}
	}()
	requests := func() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.requests) }
	eventually.True(t, 20*time.Second, "first read", func() bool { return requests() >= 2 })
	var subs []string
	eventually.True(t, 10*time.Second, "push subscription listed", func() bool { subs = subscriptionsOf(t, push); return len(subs) == 1 })
	n0 := requests()

	other, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	unload, _ := http.NewRequestWithContext(t.Context(), http.MethodPut,
		brokertest.AdminURL()+"/admin/v2/non-persistent/"+strings.TrimPrefix(push, "non-persistent://")+"/unload", nil)
	var thief pulsar.Consumer
	eventually.Succeeds(t, 20*time.Second, "the other consumer takes the subscription", func() error {
		res, err := http.DefaultClient.Do(unload.Clone(t.Context()))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		thief, err = other.Subscribe(pulsar.ConsumerOptions{Topic: push, SubscriptionName: subs[0], Type: pulsar.Exclusive})
		return err
	})
	defer thief.Close()
	eventually.True(t, 30*time.Second, "the session started again (a new read)", func() bool { return requests() > n0 })
}
