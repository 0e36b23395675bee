package limits

import (
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a manual clock for tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestAllow(t *testing.T) {
	t.Parallel()
	type step struct {
		advance time.Duration
		key     string
		ok      bool
		wait    time.Duration
	}
	tests := []struct {
		name      string
		perSecond float64
		burst     int
		steps     []step
	}{
		{"burst then wait", 1, 2, []step{
			{0, "a", true, 0},
			{0, "a", true, 0},
			{0, "a", false, time.Second},
			{500 * time.Millisecond, "a", false, 500 * time.Millisecond},
			{500 * time.Millisecond, "a", true, 0},
			{0, "a", false, time.Second},
		}},
		{"keys are independent", 1, 1, []step{
			{0, "a", true, 0},
			{0, "a", false, time.Second},
			{0, "b", true, 0},
			{0, "", true, 0},
			{0, "", false, time.Second},
		}},
		{"a refused call costs nothing", 2, 1, []step{
			{0, "a", true, 0},
			{0, "a", false, 500 * time.Millisecond},
			{0, "a", false, 500 * time.Millisecond},
			{500 * time.Millisecond, "a", true, 0},
		}},
		{"no limit", 0, 0, []step{
			{0, "a", true, 0},
			{0, "a", true, 0},
			{0, "a", true, 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClock()
			l, err := New(tc.perSecond, tc.burst, withClock(c.now))
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				c.advance(s.advance)
				ok, wait := l.Allow(s.key)
				if ok != s.ok || wait != s.wait {
					t.Fatalf("step %d (%q): Allow = %v, %v; want %v, %v", i, s.key, ok, wait, s.ok, s.wait)
				}
			}
		})
	}
}

func TestBuckets(t *testing.T) {
	t.Parallel()
	type step struct {
		advance time.Duration
		key     string
	}
	tests := []struct {
		name  string
		max   int
		idle  time.Duration
		steps []step
		keys  []string // buckets held at the end
	}{
		{"bounded: least recently used goes", 3, time.Hour, []step{{0, "a"}, {0, "b"}, {0, "c"}, {0, "d"}}, []string{"b", "c", "d"}},
		{"use keeps a bucket", 3, time.Hour, []step{{0, "a"}, {0, "b"}, {0, "c"}, {0, "a"}, {0, "d"}}, []string{"a", "c", "d"}},
		{"idle buckets go", 100, time.Minute, []step{{0, "a"}, {0, "b"}, {30 * time.Second, "c"}, {31 * time.Second, "d"}}, []string{"c", "d"}},
		{"all idle go", 100, time.Minute, []step{{0, "a"}, {0, "b"}, {time.Hour, "z"}}, []string{"z"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClock()
			l, err := New(1000, 1, WithMaxKeys(tc.max), WithIdleTimeout(tc.idle), withClock(c.now))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.steps {
				c.advance(s.advance)
				l.Allow(s.key)
			}
			if l.Len() != len(tc.keys) {
				t.Fatalf("%d buckets, want %v", l.Len(), tc.keys)
			}
			for _, k := range tc.keys {
				if _, ok := l.buckets[k]; !ok {
					t.Errorf("bucket %q dropped", k)
				}
			}
		})
	}
}

func TestIdleNeverShorterThanRefill(t *testing.T) {
	t.Parallel()
	c := newClock()
	// An empty bucket takes 1000 s to fill; dropping it after a minute
	// would hand out a full one early.
	l, err := New(0.01, 10, WithIdleTimeout(time.Minute), withClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		l.Allow("a")
	}
	c.advance(90 * time.Second) // 0.9 of a token back: still empty
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("the drained bucket was dropped before it could have refilled")
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		perSecond float64
		burst     int
		opts      []Option
		wantErr   string
	}{
		{"ok", 10, 20, nil, ""},
		{"no limit needs no burst", 0, 0, nil, ""},
		{"zero burst", 10, 0, nil, "burst"},
		{"zero max keys", 10, 1, []Option{WithMaxKeys(0)}, "max keys"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tc.perSecond, tc.burst, tc.opts...)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}
