package toolservice

import (
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
)

// Bounds of the replies kept for a resend (wire.CreditResend): the last
// message of each recent call, for recentTTL, at most recentMax of them and
// recentMaxBytes of payload in all; a message larger than recentMaxMessage
// is not kept.
const (
	recentMax        = 4096
	recentMaxBytes   = 8 << 20
	recentMaxMessage = 256 << 10
	recentTTL        = time.Minute
)

// recentReplies keeps the last reply message of recent calls, so that a
// caller whose consumer was away when it was published (its topic moved
// to another broker) can ask for it once more.
type recentReplies struct {
	mu    sync.Mutex
	byID  map[string]recentReply
	fifo  []string // ids, oldest first from head
	head  int
	bytes int
}

type recentReply struct {
	topic string
	msg   transport.Message
	at    time.Time
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
	if old, ok := r.byID[id]; ok { // an id answered twice: the later reply
		r.bytes -= len(old.msg.Payload)
	} else {
		r.fifo = append(r.fifo, id)
	}
	r.byID[id] = recentReply{topic: topic, msg: msg, at: now}
	r.bytes += len(msg.Payload)
	for len(r.byID) > recentMax || r.bytes > recentMaxBytes {
		r.dropOldest()
	}
	r.expire(now)
}

// take returns and forgets the reply kept for id, if it is there and not
// too old.
func (r *recentReplies) take(id string, now time.Time) (recentReply, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	rep, ok := r.byID[id]
	if ok {
		delete(r.byID, id)
		r.bytes -= len(rep.msg.Payload)
	}
	return rep, ok
}

// expire forgets the replies older than recentTTL.
func (r *recentReplies) expire(now time.Time) {
	for r.head < len(r.fifo) {
		rep, ok := r.byID[r.fifo[r.head]]
		if ok && now.Sub(rep.at) < recentTTL {
			return
		}
		r.dropOldest()
	}
}

// dropOldest forgets the oldest id of the queue (one taken already is only
// dequeued), and compacts the queue once half of it is spent.
func (r *recentReplies) dropOldest() {
	if r.head >= len(r.fifo) {
		return
	}
	id := r.fifo[r.head]
	r.fifo[r.head] = ""
	r.head++
	if rep, ok := r.byID[id]; ok {
		delete(r.byID, id)
		r.bytes -= len(rep.msg.Payload)
	}
	if r.head > 64 && r.head*2 > len(r.fifo) {
		r.fifo = append(r.fifo[:0], r.fifo[r.head:]...)
		r.head = 0
	}
}

// len is how many replies are kept.
func (r *recentReplies) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}
