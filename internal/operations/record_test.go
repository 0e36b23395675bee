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

func TestRunningPastItsDeadlineHasFailed(t *testing.T) {
	now := time.Now()
	r := Record{ID: testID, Owner: "a", State: Running, DeadlineMS: now.Add(-time.Second).UnixMilli()}
	got := r.Now(now)
	if got.State != Failed || got.Failure == nil || got.Failure.Reason != ReasonDeadline {
		t.Fatalf("past its deadline: %+v", got)
	}
	if r.expired(now, time.Hour) || !r.expired(now.Add(2*time.Hour), time.Hour) {
		t.Fatal("expiry does not count from the deadline")
	}
}

func TestRunningNeverReplacesFinished(t *testing.T) {
	table := map[string]Record{testID: {ID: testID, Owner: "a", State: Done, Output: "x"}}
	applyTo(table, map[string]int{}, testID, decoded(t, testID, `{"id":"`+testID+`","owner":"a","state":"running"}`))
	if table[testID].State != Done {
		t.Fatalf("a late running record replaced the finished one: %+v", table[testID])
	}
	applyTo(table, map[string]int{}, testID, nil)
	if _, ok := table[testID]; ok {
		t.Fatal("a tombstone left the record")
	}
}

func TestCancelledStands(t *testing.T) {
	table := map[string]Record{testID: {ID: testID, Owner: "a", State: Cancelled}}
	applyTo(table, map[string]int{}, testID, decoded(t, testID, `{"id":"`+testID+`","owner":"a","state":"failed","error":{"type":"timeout"}}`))
	if table[testID].State != Cancelled {
		t.Fatalf("a reply recorded after the cancel replaced it: %+v", table[testID])
	}
	table[testID] = Record{ID: testID, Owner: "a", State: Done}
	applyTo(table, map[string]int{}, testID, decoded(t, testID, `{"id":"`+testID+`","owner":"a","state":"cancelled"}`))
	if table[testID].State != Cancelled {
		t.Fatalf("a cancel recorded after a racing reply did not stand: %+v", table[testID])
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
