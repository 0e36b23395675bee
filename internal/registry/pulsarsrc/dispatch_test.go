package pulsarsrc

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/registry"
)

// A large announcement being parsed does not hold up a small one: the
// small one is applied while the large one's parse is still blocked.
func TestDispatcherLargeDoesNotHoldUpSmall(t *testing.T) {
	release := make(chan struct{})
	applied := make(chan string, 10)
	d := newDispatcher(func(u registry.Update) {
		if len(u.Doc) >= largeDoc {
			<-release
		}
		applied <- u.Unit
	}, 1<<30)
	defer d.close()
	d.submit(registry.Update{Unit: "big", Doc: []byte(strings.Repeat("x", largeDoc))})
	d.submit(registry.Update{Unit: "small", Doc: []byte("{}")})
	select {
	case u := <-applied:
		if u != "small" {
			t.Fatalf("applied %s first", u)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the small announcement waited for the large one")
	}
	close(release)
	if u := <-applied; u != "big" {
		t.Fatalf("applied %s, want big", u)
	}
	d.idle()
}

// Of the updates of one unit, the last one submitted is the one that ends
// applied, whatever the lanes, and two of one unit never run at once.
func TestDispatcherLastUpdateOfAUnitWins(t *testing.T) {
	var mu sync.Mutex
	last := map[string]string{}
	running := map[string]bool{}
	d := newDispatcher(func(u registry.Update) {
		mu.Lock()
		if running[u.Unit] {
			mu.Unlock()
			t.Errorf("two updates of %s at once", u.Unit)
			return
		}
		running[u.Unit] = true
		mu.Unlock()
		for range len(u.Doc) % 3 { // some updates take longer: let others run meanwhile
			runtime.Gosched()
		}
		mu.Lock()
		last[u.Unit] = string(u.Doc)
		running[u.Unit] = false
		mu.Unlock()
	}, 4*largeDoc)
	defer d.close()
	want := map[string]string{}
	for i := range 500 {
		unit := fmt.Sprintf("s%d", i%7)
		doc := fmt.Sprintf("%d", i)
		if i%5 == 0 {
			doc += strings.Repeat(" ", largeDoc) // the large lane
		}
		if i%11 == 0 {
			doc = "" // a withdrawal
		}
		want[unit] = doc
		d.submit(registry.Update{Unit: unit, Doc: []byte(doc)})
	}
	d.idle()
	mu.Lock()
	defer mu.Unlock()
	for unit, doc := range want {
		if last[unit] != doc {
			t.Errorf("%s ends with %.10q, want %.10q", unit, last[unit], doc)
		}
	}
}
