package registry

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func announcement(id, tool string) []byte {
	return []byte(`{"tool-service": {"` + id + `": {"id": "` + id + `", "topic": "` + id + `"}},
	 "tool": {"` + tool + `": {"type": "tool-service", "name": "` + tool + `", "service": "` + id + `"}}}`)
}

func TestMergePrecedenceAndConflicts(t *testing.T) {
	var swaps int
	m := NewMerger(nil, func(*Snapshot) { swaps++ })
	if len(m.Registry().Snapshot().Tools()) != 0 {
		t.Fatal("a new merger serves tools")
	}
	file := []byte(`
tool-service: {joke-service: {id: joke-service, topic: joke}}
tool: {tell-joke: {type: tool-service, name: tell-joke, service: joke-service}}
`)
	if err := m.Apply(Update{Origin: OriginFile, Name: "r.yaml", Doc: file}); err != nil {
		t.Fatal(err)
	}
	// The announcement reuses the file's service id: the file wins, the
	// announced service and its tool are dropped and reported.
	if err := m.Apply(Update{Origin: OriginAnnouncement, Unit: "joke-service", Doc: announcement("joke-service", "joke2")}); err != nil {
		t.Fatal(err)
	}
	// Another announcement names a tool the file defines.
	clash := []byte(`{"tool-service": {"other": {"topic": "other"}}, "tool": {"tell-joke": {"type": "tool-service", "service": "other"}, "fine": {"type": "tool-service", "service": "other"}}}`)
	if err := m.Apply(Update{Origin: OriginAnnouncement, Unit: "other", Doc: clash}); err != nil {
		t.Fatal(err)
	}
	snap := m.Registry().Snapshot()
	tl, ok := snap.Tool("tell-joke")
	if !ok || tl.Origin != OriginFile || tl.Service.RequestTopic != "non-persistent://tg/request/joke" {
		t.Fatalf("tell-joke = %+v, want the file's", tl)
	}
	if _, ok := snap.Tool("joke2"); ok {
		t.Fatal("a tool of a service that lost its conflict is served")
	}
	if f, ok := snap.Tool("fine"); !ok || f.Origin != OriginAnnouncement {
		t.Fatalf("fine = %+v, want it from the announcement", f)
	}
	cs := m.Conflicts()
	var got []string
	for _, c := range cs {
		got = append(got, c.Kind+" "+c.Name+" "+c.Winner+" > "+c.Loser)
	}
	want := []string{
		"tool-service joke-service file r.yaml > announcement joke-service",
		"tool joke2 file r.yaml > announcement joke-service",
		"tool tell-joke file r.yaml > announcement other",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("conflicts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The file gives the name up: the announcement's tool takes its place,
	// and the conflict is gone.
	if err := m.Apply(Update{Origin: OriginFile, Name: "r.yaml", Doc: []byte(`tool-service: {}`)}); err != nil {
		t.Fatal(err)
	}
	snap = m.Registry().Snapshot()
	if tl, ok := snap.Tool("tell-joke"); !ok || tl.Origin != OriginAnnouncement || tl.Service.ID != "other" {
		t.Fatalf("tell-joke after the file dropped it = %+v", tl)
	}
	if _, ok := snap.Tool("joke2"); !ok {
		t.Fatal("joke2 should be served once its service no longer conflicts")
	}
	if n := len(m.Conflicts()); n != 0 {
		t.Fatalf("%d conflicts left: %v", n, m.Conflicts())
	}
	if swaps != 4 || snap.Version != 5 { // the empty snapshot was version 1
		t.Fatalf("swaps %d, version %d", swaps, snap.Version)
	}
}

func TestMergeAnnouncementRejectedAndWithdrawn(t *testing.T) {
	m := NewMerger(nil, nil)
	if err := m.Apply(Update{Origin: OriginAnnouncement, Unit: "echo", Doc: announcement("echo", "echo")}); err != nil {
		t.Fatal(err)
	}
	v := m.Registry().Snapshot().Version
	bad := []struct{ name, unit, doc, want string }{
		{"not JSON", "echo", `{"tool-service": `, "not valid JSON"},
		{"bad argument type", "echo", `{"tool-service": {"echo": {"topic": "echo"}}, "tool": {"e": {"type": "tool-service", "service": "echo", "arguments": [{"name": "a", "type": "date"}]}}}`, `unknown type "date"`},
		{"another service's id", "echo", `{"tool-service": {"not-echo": {"topic": "x"}}}`, "exactly one tool service"},
		{"two services", "echo", `{"tool-service": {"echo": {"topic": "echo"}, "x": {"topic": "x"}}}`, "exactly one tool service"},
		{"no key", "", string(announcement("echo", "echo")), "message key"},
		{"unknown section", "echo", `{"tool-service": {"echo": {"topic": "echo"}}, "flow": {}}`, "unknown section"},
	}
	for _, b := range bad {
		err := m.Apply(Update{Origin: OriginAnnouncement, Unit: b.unit, Doc: []byte(b.doc)})
		if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: err = %v, want a rejection mentioning %q", b.name, err, b.want)
		}
	}
	snap := m.Registry().Snapshot()
	if _, ok := snap.Tool("echo"); !ok || snap.Version != v {
		t.Fatalf("a rejected announcement changed the registry (version %d → %d)", v, snap.Version)
	}
	if got := m.Rejected(OriginAnnouncement); got != int64(len(bad)) {
		t.Fatalf("rejected = %d, want %d", got, len(bad))
	}
	// The same announcement again is no new version.
	if err := m.Apply(Update{Origin: OriginAnnouncement, Unit: "echo", Doc: announcement("echo", "echo")}); err != nil || m.Registry().Snapshot().Version != v {
		t.Fatalf("a repeated announcement: err %v, version %d", err, m.Registry().Snapshot().Version)
	}
	// A tombstone withdraws the service and its tools.
	if err := m.Apply(Update{Origin: OriginAnnouncement, Unit: "echo"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Registry().Snapshot().Tool("echo"); ok {
		t.Fatal("a withdrawn tool is still served")
	}
	if _, ok := m.Registry().Snapshot().Service("echo"); ok {
		t.Fatal("a withdrawn service is still served")
	}
}

// The config service's values are taken one by one: a bad one is reported
// and left out, the others served.
func TestMergeConfigServiceLenient(t *testing.T) {
	m := NewMerger(nil, nil)
	m.Enable(OriginConfigService)
	doc := []byte(`{"tool-service": {"joke-service": "{\"id\": \"joke-service\", \"request-queue\": \"non-persistent://tg/request/joke\", \"response-queue\": \"non-persistent://tg/response/joke\"}",
	                                  "broken": "not json"},
	                "tool": {"tell-joke": "{\"type\": \"tool-service\", \"name\": \"tell-joke\", \"service\": \"joke-service\"}",
	                         "orphan": "{\"type\": \"tool-service\", \"service\": \"broken\"}"}}`)
	if err := m.Apply(Update{Origin: OriginConfigService, Name: "workspace default", Doc: doc}); err != nil {
		t.Fatal(err)
	}
	snap := m.Registry().Snapshot()
	if tl, ok := snap.Tool("tell-joke"); !ok || tl.Origin != OriginConfigService {
		t.Fatalf("tell-joke = %+v", tl)
	}
	if _, ok := snap.Tool("orphan"); ok {
		t.Fatal("a tool of an invalid service is served")
	}
	st := m.Status()
	if len(st) != 1 || st[0].Origin != OriginConfigService || st[0].Rejected != 2 || !strings.Contains(st[0].LastRejection, "broken") {
		t.Fatalf("status %+v", st)
	}
}

// Updates applied at once from many goroutines reach onSwap one at a time
// and in version order, so what onSwap hands on (the bridge's response
// topics) ends as the newest snapshot says.
func TestOnSwapInVersionOrder(t *testing.T) {
	var mu sync.Mutex
	var versions []int64
	inSwap := false
	m := NewMerger(nil, func(s *Snapshot) {
		mu.Lock()
		if inSwap {
			t.Error("onSwap called while another call runs")
		}
		inSwap = true
		versions = append(versions, s.Version)
		mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		mu.Lock()
		inSwap = false
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				id := fmt.Sprintf("s%d-%d", i, j)
				doc := fmt.Sprintf(`{"tool-service": {%q: {"topic": %q}}}`, id, id)
				if err := m.Apply(Update{Origin: OriginAnnouncement, Unit: id, Doc: []byte(doc)}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(versions); i++ {
		if versions[i] <= versions[i-1] {
			t.Fatalf("onSwap saw version %d after %d", versions[i], versions[i-1])
		}
	}
	if len(versions) != 400 {
		t.Fatalf("%d swaps, want 400", len(versions))
	}
}
