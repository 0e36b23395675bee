package brokertest

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/toolgate/toolgate/internal/transport"
)

// Subscribed reports whether topic has at least one subscription with a
// consumer: on the in-memory broker directly, on Pulsar through the admin
// API's topic stats.
func Subscribed(br transport.Broker, topic string) bool {
	if m, ok := br.(interface{ Subscribers(topic string) int }); ok {
		return m.Subscribers(topic) > 0 // the in-memory broker, or a wrapper of it
	}
	return Subscriptions(topic) > 0
}

// Subscriptions counts the consumers on a Pulsar topic, from the admin
// API's stats (0 when the topic does not exist yet).
func Subscriptions(topic string) int {
	scheme, rest, ok := strings.Cut(topic, "://")
	if !ok {
		return 0
	}
	resp, err := adminClient.Get(AdminURL() + "/admin/v2/" + scheme + "/" + rest + "/stats")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0
	}
	var st struct {
		Subscriptions map[string]struct {
			Consumers []json.RawMessage `json:"consumers"`
		} `json:"subscriptions"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return 0
	}
	n := 0
	for _, s := range st.Subscriptions {
		n += len(s.Consumers)
	}
	return n
}
