package wire

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCallWordsRoundTrip(t *testing.T) {
	dl := time.UnixMilli(1765000000123)
	for _, w := range []CallWords{
		{},
		{ReplyTo: "non-persistent://tg/response/toolgate-reply-gw-1"},
		{Credit: 64},
		{Deadline: DeadlineMillis(dl)},
		{Receipt: true},
		{ReplyTo: "non-persistent://tg/response/r", Credit: 1024, Deadline: DeadlineMillis(dl), Receipt: true},
		{Caller: "eyJhbGciOiJFZERTQSJ9.eyJqdGkiOiJjMSJ9.c2ln-_"},
		{ReplyTo: "non-persistent://tg/response/r", Receipt: true, Caller: "eyJhbGciOiJFZERTQSJ9.eyJqdGkiOiJjMSJ9.c2ln-_"},
	} {
		packed := string(AppendCall(nil, w))
		props := map[string]string{PropID: "c1"}
		if packed != "" {
			props[PropCall] = packed
		}
		got := ExpandCall(props)
		want := map[string]string{PropID: "c1"}
		if packed != "" {
			want[PropCall] = packed
		}
		if w.ReplyTo != "" {
			want[PropReplyTo] = w.ReplyTo
		}
		if w.Credit > 0 {
			want[PropCredit] = strconv.Itoa(w.Credit)
		}
		if w.Deadline > 0 {
			want[PropDeadline] = FormatDeadline(dl)
		}
		if w.Receipt {
			want[PropReceipt] = "1"
		}
		if w.Caller != "" {
			want[PropCaller] = w.Caller
		}
		if !maps.Equal(got, want) {
			t.Errorf("%+v packed as %q expands to %v, want %v", w, packed, got, want)
		}
		if packed == "" && len(got) != 1 {
			t.Errorf("no words: %v", got)
		}
	}
}

func TestExpandCall(t *testing.T) {
	// Without PropCall the map is returned as it is (an older caller's
	// words stay where they are).
	old := map[string]string{PropID: "a", PropCredit: "8"}
	if got := ExpandCall(old); !maps.Equal(got, old) {
		t.Fatalf("without %s: %v", PropCall, got)
	}
	in := map[string]string{PropID: "a", PropCredit: "8", PropCall: "credit=16;bogus;=x;receipt=;later-word=7;deadline-ms=5"}
	got := ExpandCall(in)
	want := map[string]string{PropID: "a", PropCredit: "16", PropDeadline: "5", PropCall: in[PropCall]}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v (PropCall's word counts; malformed and unknown words ignored)", got, want)
	}
	if in[PropCredit] != "8" || len(in) != 3 {
		t.Fatalf("the message's own map was changed: %v", in)
	}
}

func FuzzExpandCall(f *testing.F) {
	f.Add("reply-to=non-persistent://tg/response/r;credit=1024;deadline-ms=1765000000123;receipt=1")
	f.Add(";;==;credit")
	f.Fuzz(func(t *testing.T, packed string) {
		got := ExpandCall(map[string]string{PropID: "x", PropCall: packed})
		if got[PropID] != "x" || got[PropCall] != packed {
			t.Fatalf("lost the message's own properties: %v", got)
		}
		for _, k := range []string{PropReplyTo, PropCredit, PropDeadline, PropReceipt} {
			if v, ok := got[k]; ok && (v == "" || strings.Contains(v, ";") || !strings.Contains(packed, v)) {
				t.Fatalf("%s = %q from %q", k, v, packed)
			}
		}
	})
}
