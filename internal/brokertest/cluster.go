package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Cluster addresses a local Pulsar cluster of two brokers as
// scripts/pulsar-cluster.sh runs it on the given ports, and steers where
// its topics live. Brokers are numbered 0 and 1.
type Cluster struct {
	ZK, Bookie  int
	BrokerPorts [2]int // binary protocol
	WebPorts    [2]int // admin (HTTP)
}

// clusterHTTP follows the brokers' redirects to a topic's or bundle's owner.
var clusterHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// Env is the script's port variables for c.
func (c *Cluster) Env() []string {
	return []string{
		"PULSAR_CLUSTER_ZK_PORT=" + strconv.Itoa(c.ZK),
		"PULSAR_CLUSTER_BOOKIE_PORT=" + strconv.Itoa(c.Bookie),
		"PULSAR_CLUSTER_BROKER1_PORT=" + strconv.Itoa(c.BrokerPorts[0]),
		"PULSAR_CLUSTER_WEB1_PORT=" + strconv.Itoa(c.WebPorts[0]),
		"PULSAR_CLUSTER_BROKER2_PORT=" + strconv.Itoa(c.BrokerPorts[1]),
		"PULSAR_CLUSTER_WEB2_PORT=" + strconv.Itoa(c.WebPorts[1]),
	}
}

// BrokerURL is broker i's own service URL.
func (c *Cluster) BrokerURL(i int) string {
	return fmt.Sprintf("pulsar://127.0.0.1:%d", c.BrokerPorts[i])
}

// ServiceURL names both brokers, broker first first: a client looks topics
// up at either (pulsar-client-go starts at a random one of the list and
// goes round it), so it can still find a topic's new owner when one broker
// is gone (a URL with only the dead broker never could).
func (c *Cluster) ServiceURL(first int) string {
	return fmt.Sprintf("pulsar://127.0.0.1:%d,127.0.0.1:%d", c.BrokerPorts[first], c.BrokerPorts[1-first])
}

// Admin is broker i's admin API.
func (c *Cluster) Admin(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", c.WebPorts[i]) }

// BrokerID is how the load manager names broker i (an unload's
// destinationBroker).
func (c *Cluster) BrokerID(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.WebPorts[i]) }

// Owner is the broker that owns topic, by a lookup at the first broker
// that answers (which assigns an owner when the bundle has none).
func (c *Cluster) Owner(topic string) (int, error) {
	scheme, rest, _ := strings.Cut(topic, "://")
	var last error
	for i := range 2 {
		resp, err := clusterHTTP.Get(c.Admin(i) + "/lookup/v2/topic/" + scheme + "/" + rest)
		if err != nil {
			last = err
			continue
		}
		var r struct {
			BrokerURL string `json:"brokerUrl"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("lookup of %s at broker%d: %s", topic, i+1, resp.Status)
			continue
		}
		if err != nil {
			last = fmt.Errorf("lookup of %s at broker%d: %w", topic, i+1, err)
			continue
		}
		for j := range 2 {
			if r.BrokerURL == c.BrokerURL(j) {
				return j, nil
			}
		}
		return -1, fmt.Errorf("lookup of %s: owner %q is neither broker", topic, r.BrokerURL)
	}
	return -1, last
}

// Unload unloads the (single) bundle of namespace ns to broker dst,
// through dst's admin API: its topics move there.
func (c *Cluster) Unload(ns string, dst int) error {
	req, err := http.NewRequest(http.MethodPut, c.Admin(dst)+"/admin/v2/namespaces/"+ns+"/0x00000000_0xffffffff/unload?destinationBroker="+c.BrokerID(dst), nil)
	if err != nil {
		return err
	}
	resp, err := clusterHTTP.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("unload %s to broker%d: %s", ns, dst+1, resp.Status)
	}
	return nil
}

// Place moves namespace ns, whose topic is topic, to broker dst and waits
// until a lookup of topic names dst: an unload's destination is a hint the
// load manager may miss when a lookup races it, so it is tried again (20
// times, 250 ms apart) until the topic is there.
func (c *Cluster) Place(ctx context.Context, ns, topic string, dst int) error {
	var last error
	for range 20 {
		o, err := c.Owner(topic)
		if err == nil && o == dst {
			return nil
		}
		if err == nil {
			err = c.Unload(ns, dst)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not move to broker%d: %w", ns, dst+1, last)
}

// Consumers counts the consumers the owner of topic reports on it (0 when
// no broker answers).
func (c *Cluster) Consumers(topic string) int {
	scheme, rest, _ := strings.Cut(topic, "://")
	for i := range 2 {
		resp, err := clusterHTTP.Get(c.Admin(i) + "/admin/v2/" + scheme + "/" + rest + "/stats")
		if err != nil {
			continue
		}
		var st struct {
			Subscriptions map[string]struct {
				Consumers []json.RawMessage `json:"consumers"`
			} `json:"subscriptions"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			continue
		}
		n := 0
		for _, s := range st.Subscriptions {
			n += len(s.Consumers)
		}
		return n
	}
	return 0
}
