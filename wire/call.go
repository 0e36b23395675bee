package wire

import (
	"strconv"
	"strings"
	"time"
)

// PropCall carries toolgate's words on a request — PropReplyTo,
// PropCredit, PropDeadline, PropReceipt and PropCaller — in one property, as
// "reply-to=T;credit=N;deadline-ms=MS;receipt=1;caller=JWS", each word present only
// when set. toolgate writes its requests so: every message property costs
// the Pulsar client several allocations, twice over in a batch, and the
// words travel together anyway. A service reads it with ExpandCall, which
// also takes them as properties of their own (an older caller's form);
// where both are given, PropCall's word counts. Unknown words are
// ignored, so later callers may add some. TrustGraph's Python services
// ignore it, as they ignore the words.
const PropCall = "toolgate-call"

// CallWords are a request's toolgate words; "" (false) for one not set.
type CallWords struct {
	ReplyTo string
	// Credit is the first window of flow control (PropCredit), 0 for
	// none.
	Credit int
	// Deadline is the absolute deadline in Unix milliseconds, 0 for none.
	Deadline int64
	Receipt  bool
	// Caller is the caller assertion (PropCaller), "" for none. A compact
	// JWS holds neither ";" nor "=".
	Caller string
}

// The words of PropCall.
const (
	wordReplyTo  = "reply-to"
	wordCredit   = "credit"
	wordDeadline = "deadline-ms"
	wordReceipt  = "receipt"
	wordCaller   = "caller"
)

// AppendCall appends w as PropCall's value to dst; nothing when no word
// is set.
func AppendCall(dst []byte, w CallWords) []byte {
	start := len(dst)
	word := func(name string) {
		if len(dst) > start {
			dst = append(dst, ';')
		}
		dst = append(dst, name...)
		dst = append(dst, '=')
	}
	if w.ReplyTo != "" {
		word(wordReplyTo)
		dst = append(dst, w.ReplyTo...)
	}
	if w.Credit > 0 {
		word(wordCredit)
		dst = strconv.AppendInt(dst, int64(w.Credit), 10)
	}
	if w.Deadline > 0 {
		word(wordDeadline)
		dst = strconv.AppendInt(dst, w.Deadline, 10)
	}
	if w.Receipt {
		word(wordReceipt)
		dst = append(dst, '1')
	}
	if w.Caller != "" {
		word(wordCaller)
		dst = append(dst, w.Caller...)
	}
	return dst
}

// DeadlineMillis is t as CallWords.Deadline: 0 for the zero time.
func DeadlineMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// ExpandCall returns props with PropCall's words as properties of their
// own (PropReplyTo, PropCredit, PropDeadline, PropReceipt, PropCaller), in a new map;
// props itself when it has no PropCall. A word PropCall gives replaces the
// property of the same meaning; a malformed or unknown word is ignored.
func ExpandCall(props map[string]string) map[string]string {
	packed, ok := props[PropCall]
	if !ok {
		return props
	}
	out := make(map[string]string, len(props)+5)
	for k, v := range props {
		out[k] = v
	}
	for packed != "" {
		var w string
		w, packed, _ = strings.Cut(packed, ";")
		name, value, ok := strings.Cut(w, "=")
		if !ok || value == "" {
			continue
		}
		switch name {
		case wordReplyTo:
			out[PropReplyTo] = value
		case wordCredit:
			out[PropCredit] = value
		case wordDeadline:
			out[PropDeadline] = value
		case wordReceipt:
			out[PropReceipt] = value
		case wordCaller:
			out[PropCaller] = value
		}
	}
	return out
}
