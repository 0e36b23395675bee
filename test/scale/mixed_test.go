package scale

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
)

// TestMixedReplicasOneTopic: a Go SDK replica and TrustGraph's Python
// joke service share one request topic and subscription (one service id).
// The Go replica answers on the gateway's reply topic, numbered; the
// Python one on the shared response topic, unnumbered. Every call is
// answered, by either, once the gateway has seen the Go replica honour
// reply-to too.
func TestMixedReplicasOneTopic(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Skip(err)
	}
	id, topic := brokertest.UniqueTopic("mixed-svc"), brokertest.UniqueTopic("mixed")
	startPythonJokesAs(t, topic, id) // first: it waits until the topic has a subscription
	svc, err := toolservice.New(toolservice.Config{ID: id, Topic: topic, PulsarURL: brokertest.PulsarURL()},
		func(context.Context, *toolservice.Request) (any, error) { return "go", nil })
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RunService(t, "go replica", svc, 30*time.Second)

	br, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(br.Close)
	b := bridge.New(br, bridge.Options{ReplyTopic: wire.ReplyTopic(brokertest.UniqueTopic("mixed-gw"))})
	t.Cleanup(b.Close)
	target := bridge.Target{RequestTopic: wire.RequestTopic(topic), ResponseTopic: wire.ResponseTopic(topic)}
	if err := b.ListenAll(t.Context(), func() []string { return []string{target.ResponseTopic} }); err != nil {
		t.Fatal(err)
	}
	call := func() (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		c, err := b.Call(ctx, target, wire.Request{Config: `{"style":"pun"}`, Arguments: `{"topic":"programming"}`}, bridge.CallOptions{})
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.Wait(ctx)
	}
	// Calls until the Go replica has answered one: from then on the
	// gateway knows the service honours reply-to.
	for i := 0; len(b.Honouring()) == 0; i++ {
		if i == 50 {
			t.Fatal("the Go replica answered none of 50 calls")
		}
		if _, err := call(); err != nil {
			t.Fatalf("call before the Go replica answered: %v", err)
		}
	}
	// One at a time, so that the shared subscription deals the requests
	// out to both replicas (a batch of them goes to one consumer).
	const n = 40
	var (
		goN, pyN      int
		failed        []string
		refusedBefore = b.Stats().RefusedReplies
	)
	for range n {
		out, err := call()
		switch {
		case err != nil:
			failed = append(failed, err.Error())
		case out == "go":
			goN++
		case strings.HasPrefix(out, jokeStart):
			pyN++
		default:
			failed = append(failed, "unexpected answer "+out)
		}
		if len(failed) >= 3 {
			break
		}
	}
	t.Logf("%d calls at most: %d answered by the Go replica, %d by the Python one, %d failed; %d replies refused",
		n, goN, pyN, len(failed), b.Stats().RefusedReplies-refusedBefore)
	if len(failed) > 0 {
		t.Fatalf("%d of %d calls failed, e.g. %s", len(failed), n, failed[0])
	}
	if goN == 0 || pyN == 0 {
		t.Fatalf("answers: %d from Go, %d from Python; want both kinds of replica to answer", goN, pyN)
	}
	if r := b.Stats().RefusedReplies - refusedBefore; r != 0 {
		t.Fatalf("%d replies refused", r)
	}
}
