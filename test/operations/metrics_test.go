package operations_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
)

// scrape returns the value of the series named series (name and labels
// as the exposition writes them) on the admin listener at admin.
func scrape(t *testing.T, admin, series string) float64 {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}

// TestOperationMetrics: the admin listener's operation metrics move as
// operations start and end — done, failed, cancelled, expired — and the
// running gauge counts the one still running.
func TestOperationMetrics(t *testing.T) {
	// "deaf" answers, whatever its deadline, only once the gateway that
	// started it counted it expired: its reply comes after the deadline.
	// (Echo's sleep answers with an error at the deadline, a reply that
	// may beat the deadline's slack and be recorded failed.)
	expiredSeen := make(chan struct{})
	var once sync.Once
	releaseDeaf := func() { once.Do(func() { close(expiredSeen) }) }
	t.Cleanup(releaseDeaf)
	flags := setupWith(t, func(ctx context.Context, r *toolservice.Request) (any, error) {
		if r.Arguments["mode"] == "deaf" {
			<-expiredSeen
			return "too late", nil
		}
		return echo.Handle(ctx, r)
	})
	g := apptest.Start(t, nil, flags...)
	g.WaitReady(t, 60*time.Second)
	base, admin := "http://"+g.HTTPAddr(), "http://"+g.AdminAddr()
	const (
		started   = "toolgate_operations_started_total"
		done      = `toolgate_operations_ended_total{state="done"}`
		failed    = `toolgate_operations_ended_total{state="failed"}`
		cancelled = `toolgate_operations_ended_total{state="cancelled"}`
		expired   = `toolgate_operations_ended_total{state="expired"}`
		told      = "toolgate_operations_cancels_sent_total"
		running   = "toolgate_operations_running"
	)
	before := map[string]float64{}
	for _, s := range []string{started, done, failed, cancelled, expired, told, running} {
		before[s] = scrape(t, admin, s)
	}
	start := func(body string) string {
		t.Helper()
		code, op := do(t, http.MethodPost, base+"/v1/tools/echo:start", aliceKey, body)
		if code != http.StatusOK {
			t.Fatalf("start %s: %d %v", body, code, op)
		}
		return strings.TrimPrefix(op["name"].(string), "operations/")
	}
	quick := start(`{"arguments": {"msg": "quick"}}`)
	failing := start(`{"arguments": {"mode": "fail", "type": "not-found", "message": "no"}}`)
	start(`{"arguments": {"mode": "deaf"}, "timeout": "1s"}`)
	long := start(`{"arguments": {"mode": "sleep", "ms": 30000}, "timeout": "60s"}`)
	if got := scrape(t, admin, started) - before[started]; got != 4 {
		t.Fatalf("%s moved by %v, want 4", started, got)
	}
	if got := scrape(t, admin, running) - before[running]; got < 1 {
		t.Fatalf("%s moved by %v with the long operation running, want at least 1", running, got)
	}
	if code, e := do(t, http.MethodPost, base+"/v1/operations/"+long+":cancel", aliceKey, "{}"); code != http.StatusOK {
		t.Fatalf("cancel: %d %v", code, e)
	}
	for _, s := range []string{cancelled, told} {
		if got := scrape(t, admin, s) - before[s]; got != 1 {
			t.Fatalf("%s moved by %v, want 1", s, got)
		}
	}
	// The gateway that started an operation counts it expired.
	eventually.True(t, 10*time.Second, expired+" to move by 1", func() bool { return scrape(t, admin, expired)-before[expired] == 1 })
	releaseDeaf()
	// A reply is recorded, and counted, by the gateway the Key_Shared
	// subscription hands it to: this one, the only gateway on the test's
	// own reply topic.
	for _, id := range []string{quick, failing} {
		eventually.True(t, 10*time.Second, "operation "+id+" ended", func() bool {
			_, op := do(t, http.MethodGet, base+"/v1/operations/"+id, aliceKey, "")
			return op["done"] == true
		})
	}
	for _, s := range []string{done, failed} {
		eventually.True(t, 5*time.Second, s+" to move by 1", func() bool {
			got := scrape(t, admin, s) - before[s]
			if got > 1 {
				t.Fatalf("%s moved by %v, want 1", s, got)
			}
			return got == 1
		})
	}
	// The records it wrote came back from the state topic: a lag was
	// measured, a positive one well under the time the test took.
	if lag := scrape(t, admin, "toolgate_operations_table_lag_seconds"); lag <= 0 || lag > 30 {
		t.Fatalf("toolgate_operations_table_lag_seconds = %v, want a positive lag of less than 30 s", lag)
	}
}
