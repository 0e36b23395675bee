package operations

import (
	"testing"
	"time"
)

const testID = "0123456789abcdef0123456789abcdef"

func TestDecodeRecordChecksWhatCameFromTheBus(t *testing.T) {
	good := `{"id":"` + testID + `","owner":"alice","tool":"echo","state":"running","create_ms":1,"deadline_ms":2}`
	if _, err := decodeRecord(testID, []byte(good)); err != nil {
		t.Fatalf("a good record refused: %v", err)
	}
	for name, c := range map[string]struct{ key, rec string }{
		"key differs":   {"ffffffffffffffffffffffffffffffff", good},
		"bad id":        {"x", `{"id":"x","owner":"a","state":"running"}`},
		"no owner":      {testID, `{"id":"` + testID + `","state":"running"}`},
		"unknown state": {testID, `{"id":"` + testID + `","owner":"a","state":"odd"}`},
		"not JSON":      {testID, `nope`},
	} {
		if _, err := decodeRecord(c.key, []byte(c.rec)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A running operation past its deadline is running until its end is
// written (deadlineEnd): no reader makes the failure up, so a reader whose
// table lags never shows a failure that another end then replaces.
func TestRunningPastItsDeadlineIsRunningUntilWritten(t *testing.T) {
	now := time.Now()
	r := Record{ID: testID, Owner: "a", State: Running, DeadlineMS: now.Add(-time.Second).UnixMilli()}
	if !r.pastDeadline(now) || r.Finished() {
		t.Fatalf("past its deadline: %+v", r)
	}
	if r.expired(now.Add(48*time.Hour), time.Hour) {
		t.Fatal("a running operation expired")
	}
	r.State, r.EndMS, r.Failure = Failed, r.DeadlineMS, deadlineFailure()
	if r.expired(now, time.Hour) || !r.expired(now.Add(2*time.Hour), time.Hour) {
		t.Fatal("expiry does not count from the end")
	}
}

func TestRunningNeverReplacesFinished(t *testing.T) {
	table := map[string]Record{testID: {ID: testID, Owner: "a", State: Done, Output: "x"}}
	if _, _, stale := applyTo(table, map[string]int{}, testID, decoded(t, testID, `{"id":"`+testID+`","owner":"a","state":"running"}`)); !stale {
		t.Fatal("a running record after the end not reported stale")
	}
	if table[testID].State != Done {
		t.Fatalf("a late running record replaced the finished one: %+v", table[testID])
	}
	applyTo(table, map[string]int{}, testID, nil)
	if _, ok := table[testID]; ok {
		t.Fatal("a tombstone left the record")
	}
}

// The first end the state topic gives an operation is its end on every
// reader: a failure recorded after a cancel (the service's answer to
// it), a cancel or a deadline failure after a done, a done after a
// deadline failure change nothing, and are reported stale; the same end
// written again is not.
func TestTheFirstEndStands(t *testing.T) {
	ends := map[string]string{
		"done":      `{"id":"` + testID + `","owner":"a","state":"done","output":"x","end_ms":5,"v":2}`,
		"cancelled": `{"id":"` + testID + `","owner":"a","state":"cancelled","error":{"reason":"CANCELLED"},"end_ms":6}`,
		"failed":    `{"id":"` + testID + `","owner":"a","state":"failed","error":{"type":"timeout"},"end_ms":7}`,
		"deadline":  `{"id":"` + testID + `","owner":"a","state":"failed","error":{"reason":"DEADLINE_EXCEEDED"},"end_ms":3,"v":2}`,
	}
	for _, first := range []string{"done", "cancelled", "failed", "deadline"} {
		for _, then := range []string{"done", "cancelled", "failed", "deadline"} {
			table := map[string]Record{}
			applyTo(table, map[string]int{}, testID, decoded(t, testID, `{"id":"`+testID+`","owner":"a","state":"running","v":1}`))
			applyTo(table, map[string]int{}, testID, decoded(t, testID, ends[first]))
			want := table[testID]
			_, _, stale := applyTo(table, map[string]int{}, testID, decoded(t, testID, ends[then]))
			if got := table[testID]; !sameOutcome(got, want) {
				t.Errorf("%s then %s: the table holds %+v, want %+v", first, then, got, want)
			}
			if stale != (first != then) {
				t.Errorf("%s then %s: stale %v", first, then, stale)
			}
		}
	}
	if _, err := decodeRecord(testID, []byte(`{"id":"`+testID+`","owner":"a","state":"running","v":2}`)); err == nil {
		t.Fatal("a running record of version 2 decoded")
	}
}

func TestRunningCountedPerOwner(t *testing.T) {
	table, running := map[string]Record{}, map[string]int{}
	rec := func(id, owner, state string) {
		applyTo(table, running, id, decoded(t, id, `{"id":"`+id+`","owner":"`+owner+`","state":"`+state+`"}`))
	}
	other := "ffffffffffffffffffffffffffffffff"
	rec(testID, "a", "running")
	rec(other, "a", "running")
	rec(testID, "a", "running") // written again: still one
	if running["a"] != 2 {
		t.Fatalf("two running: counted %d", running["a"])
	}
	rec(testID, "a", "done")
	rec(testID, "a", "running") // a late running record: refused
	applyTo(table, running, other, nil)
	if n, ok := running["a"]; ok {
		t.Fatalf("none running: counted %d", n)
	}
	applyTo(table, running, testID, nil)
	if len(running) != 0 || len(table) != 0 {
		t.Fatalf("after the tombstones: running %v, table %v", running, table)
	}
}

// decoded is the record of JSON text j under key.
func decoded(t *testing.T, key, j string) *Record {
	t.Helper()
	r, err := decodeRecord(key, []byte(j))
	if err != nil {
		t.Fatal(err)
	}
	return &r
}
