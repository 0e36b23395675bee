package toolservice

import (
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
)

// Bounds of the replies kept for a resend (wire.CreditResend): the last
// message of each recent call, for recentTTL, at most recentMax of them and
// recentMaxBytes of payload in all; a message larger than recentMaxMessage
// is not kept. A reply is given out at most recentGive times: a caller asks
// again when its first request may have been lost too.
const (
	recentMax        = 4096
	recentMaxBytes   = 8 << 20
	recentMaxMessage = 256 << 10
	recentTTL        = time.Minute
	recentGive       = 3
)

// recentReplies keeps the last reply message of recent calls, so that a
// caller whose consumer was away when it was published (its topic moved
// to another broker) can ask for it again.
type recentReplies struct {
	mu    sync.Mutex
	byID  map[string]recentReply
	fifo  []recentSlot // oldest first from head; a slot whose gen is not its id's is dead
	head  int
	gen   uint64
	bytes int
}

type recentSlot struct {
	id  string
	gen uint64
}

type recentReply struct {
	topic string
	msg   transport.Message
	at    time.Time
	gen   uint64
	given int
}

// keep notes msg, the last reply of call id, sent to topic.
func (r *recentReplies) keep(id, topic string, msg transport.Message, now time.Time) {
	if len(msg.Payload) > recentMaxMessage {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[string]recentReply{}
	}
	r.expire(now)
	if old, ok := r.byID[id]; ok { // an id answered twice: the later reply, queued anew
		r.bytes -= len(old.msg.Payload)
	}
	r.gen++
	r.byID[id] = recentReply{topic: topic, msg: msg, at: now, gen: r.gen}
	r.fifo = append(r.fifo, recentSlot{id, r.gen})
	r.bytes += len(msg.Payload)
	for len(r.byID) > recentMax || r.bytes > recentMaxBytes {
		r.dropOldest()
	}
	r.compact()
}

// take returns the reply kept for id, if it is there, not too old and not
// given out recentGive times already.
func (r *recentReplies) take(id string, now time.Time) (recentReply, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	rep, ok := r.byID[id]
	if !ok {
		return rep, false
	}
	rep.given++
	if rep.given >= recentGive {
		delete(r.byID, id)
		r.bytes -= len(rep.msg.Payload)
	} else {
		r.byID[id] = rep
	}
	return rep, true
}

// live reports whether slot is its id's current entry.
func (r *recentReplies) live(slot recentSlot) bool {
	rep, ok := r.byID[slot.id]
	return ok && rep.gen == slot.gen
}

// expire forgets the replies older than recentTTL (and dequeues dead slots
// ahead of them).
func (r *recentReplies) expire(now time.Time) {
	for r.head < len(r.fifo) {
		slot := r.fifo[r.head]
		if r.live(slot) && now.Sub(r.byID[slot.id].at) < recentTTL {
			return
		}
		r.dropOldest()
	}
}

// dropOldest dequeues the oldest slot, forgetting its reply if it is live.
func (r *recentReplies) dropOldest() {
	if r.head >= len(r.fifo) {
		return
	}
	slot := r.fifo[r.head]
	r.fifo[r.head] = recentSlot{}
	r.head++
	if r.live(slot) {
		r.bytes -= len(r.byID[slot.id].msg.Payload)
		delete(r.byID, slot.id)
	}
}

// compact drops the dequeued part of the queue, and its dead slots, once
// they outnumber the live replies.
func (r *recentReplies) compact() {
	if len(r.fifo) < 64 || len(r.fifo) < 2*len(r.byID) {
		return
	}
	live := r.fifo[:0]
	for _, slot := range r.fifo[r.head:] {
		if r.live(slot) {
			live = append(live, slot)
		}
	}
	clear(r.fifo[len(live):])
	r.fifo, r.head = live, 0
}

// len is how many replies are kept.
func (r *recentReplies) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}
