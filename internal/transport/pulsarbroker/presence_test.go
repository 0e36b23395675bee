package pulsarbroker

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
)

// adminStub answers topic stats with consumers consumers, or 500 when
// broken, and counts the requests.
type adminStub struct {
	consumers atomic.Int32
	broken    atomic.Bool
	requests  atomic.Int32
	gate      atomic.Pointer[chan struct{}] // when set, answers wait until it is closed
}

func (s *adminStub) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.requests.Add(1)
	if g := s.gate.Load(); g != nil {
		<-*g
	}
	if s.broken.Load() {
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	consumers := ""
	for i := range s.consumers.Load() {
		if i > 0 {
			consumers += ","
		}
		consumers += "{}"
	}
	fmt.Fprintf(w, `{"subscriptions": {"s": {"consumers": [%s]}}}`, consumers)
}

// Only a topic's first question waits for the admin API; concurrent
// first questions share one request; a stale answer is given at once and
// refreshed by one request in the background.
func TestAdminPresence(t *testing.T) {
	stub := &adminStub{}
	stub.consumers.Store(1)
	// The admin API is slow: it holds the first answer until all eight
	// questions are asked.
	first := make(chan struct{})
	stub.gate.Store(&first)
	srv := httptest.NewServer(stub)
	defer srv.Close()
	p := NewAdminPresence(srv.URL, nil)
	p.PositiveTTL, p.NegativeTTL = 200*time.Millisecond, 100*time.Millisecond
	const topic = "non-persistent://tg/request/x"
	ctx := context.Background()

	var wg sync.WaitGroup
	var asking atomic.Int32
	for range 8 {
		wg.Go(func() {
			asking.Add(1)
			if ok, err := p.Subscribed(ctx, topic); !ok || err != nil {
				t.Errorf("first answer %v, %v; want true", ok, err)
			}
		})
	}
	eventually.True(t, 5*time.Second, "eight questions asked, one at the admin API", func() bool {
		return asking.Load() == 8 && stub.requests.Load() >= 1
	})
	runtime.Gosched() // the last to count itself asks now
	close(first)
	stub.gate.Store(nil)
	wg.Wait()
	if n := stub.requests.Load(); n != 1 {
		t.Fatalf("%d requests for 8 concurrent first questions, want 1", n)
	}
	if ok, _ := p.Subscribed(ctx, topic); !ok || stub.requests.Load() != 1 {
		t.Fatalf("a fresh answer asked the admin API again (%d requests)", stub.requests.Load())
	}

	// The service goes away; the stale "yes" is answered at once, once
	// refreshed the answer is "no".
	stub.consumers.Store(0)
	time.Sleep(250 * time.Millisecond) //nolint:forbidigo // the cached answer's PositiveTTL (200 ms) runs out by the clock
	// The admin API holds its answer until the stale ones are given: had
	// they waited for it, they would not come.
	gate := make(chan struct{})
	stub.gate.Store(&gate)
	stale := make(chan bool, 1)
	go func() {
		for range 5 {
			if ok, _ := p.Subscribed(ctx, topic); !ok {
				stale <- false
				return
			}
		}
		stale <- true
	}()
	select {
	case ok := <-stale:
		if !ok {
			t.Fatal("a stale answer changed before its refresh")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stale answers waited for the admin API")
	}
	close(gate)
	stub.gate.Store(nil)
	eventually.True(t, 5*time.Second, "the refreshed answer says no consumer", func() bool { ok, _ := p.Subscribed(ctx, topic); return !ok })
	if n := stub.requests.Load(); n != 2 {
		t.Fatalf("%d requests, want 2: one refresh for five stale answers", n)
	}

	// The admin API fails: the first question says yes with the error,
	// later ones yes without asking again until the answer is stale.
	stub.broken.Store(true)
	const other = "non-persistent://tg/request/y"
	if ok, err := p.Subscribed(ctx, other); !ok || err == nil {
		t.Fatalf("broken admin API: %v, %v; want true with the error", ok, err)
	}
	before := stub.requests.Load()
	if ok, err := p.Subscribed(ctx, other); !ok || err != nil || stub.requests.Load() != before {
		t.Fatalf("after a failed check: %v, %v, %d requests; want true, no error, no request", ok, err, stub.requests.Load()-before)
	}
}

// With several admin APIs (a cluster's brokers), a question goes on to the
// next when one cannot be reached or fails, and to the one that answered
// first after that; a 404 (no such topic) is an answer, not a failure.
func TestAdminPresenceSeveralBrokers(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // nothing listens there any more
	stub := &adminStub{}
	stub.consumers.Store(2)
	srv := httptest.NewServer(stub)
	defer srv.Close()
	p := NewAdminPresence(deadURL+", "+srv.URL+"/", nil)
	const topic = "non-persistent://tg/request/x"
	cs, err := p.Consumers(context.Background(), topic)
	if err != nil || len(cs) != 2 {
		t.Fatalf("with the first broker down: %v, %v; want 2 consumers from the second", cs, err)
	}
	if cs, err = p.Consumers(context.Background(), topic); err != nil || len(cs) != 2 || stub.requests.Load() != 2 {
		t.Fatalf("second question: %v, %v, %d requests to the live broker; want it asked first", cs, err, stub.requests.Load())
	}
	stub.broken.Store(true)
	if _, err := p.Consumers(context.Background(), topic); err == nil {
		t.Fatal("every broker failing: no error")
	}
}

// A broker's redirect to the topic's owner, another host, keeps the
// bearer token (net/http would drop it).
func TestAdminPresenceRedirectKeepsToken(t *testing.T) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"subscriptions": {"s": {"consumers": [{}]}}}`)
	}))
	defer owner.Close()
	// Another host name for the same loopback address: a redirect across hosts.
	ownerURL := strings.Replace(owner.URL, "127.0.0.1", "localhost", 1)
	asked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, ownerURL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer asked.Close()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := NewAdminPresence(asked.URL, nil)
	p.TokenFile = tok
	cs, err := p.Consumers(context.Background(), "non-persistent://tg/request/x")
	if err != nil || len(cs) != 1 {
		t.Fatalf("through the redirect: %v, %v; want the owner's one consumer", cs, err)
	}
}
