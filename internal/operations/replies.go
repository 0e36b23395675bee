package operations

// The reply lanes: the one Key_Shared subscription to the reply topic,
// each operation's replies handled in order on the lane its id hashes to.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// replyLanes is how many replies of different operations are handled at
// once: each waits for its record's write, so one lane would bound a
// gateway to one write's round trip per reply.
const replyLanes = 16

// replyLane handles the replies of the operations whose ids hash to it,
// in the order they come; partial is its operations' answers so far.
type replyLane struct {
	in      chan laneMsg
	partial map[string]*partial
}

type laneMsg struct {
	msg  transport.Message
	done func(ack bool)
}

func laneOf(id string) int {
	h := uint32(2166136261) // FNV-1a
	for i := range len(id) {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return int(h % replyLanes)
}

func (m *Manager) consume(ctx context.Context) {
	var lanes [replyLanes]*replyLane
	var wg sync.WaitGroup
	for i := range lanes {
		l := &replyLane{in: make(chan laneMsg, 64), partial: map[string]*partial{}}
		lanes[i] = l
		wg.Go(func() {
			for lm := range l.in {
				lm.done(m.onReply(l, lm.msg))
			}
		})
	}
	defer func() {
		for _, l := range lanes {
			close(l.in)
		}
		wg.Wait()
	}()
	dispatch := func(msg transport.Message, done func(bool)) {
		lanes[laneOf(msg.Properties[wire.PropID])].in <- laneMsg{msg: msg, done: done}
	}
	// One reply topic per key held: the operations started with a key
	// have their replies on its topic, which only gateways holding that
	// key consume (ReplyTopics).
	topics := m.ReplyTopics()
	var subs sync.WaitGroup
	for _, topic := range topics {
		subs.Go(func() { m.consumeTopic(ctx, topic, len(topics), dispatch) })
	}
	subs.Wait()
}

// consumeTopic attaches the subscription to one reply topic, retrying
// until it is, and keeps it until ctx ends; of is how many there are.
func (m *Manager) consumeTopic(ctx context.Context, topic string, of int, dispatch func(transport.Message, func(bool))) {
	backoff := 250 * time.Millisecond
	for {
		sub, err := m.bus.ConsumeAsync(ctx, topic, m.opts.Subscription, transport.KeyShared, dispatch)
		if err == nil {
			if m.consumedN.Add(1) == int64(of) {
				m.consumed.Store(true)
			}
			m.noteReady()
			m.log.Info("consuming operation replies", "topic", topic, "subscription", m.opts.Subscription)
			<-ctx.Done()
			m.consumedN.Add(-1)
			m.consumed.Store(false)
			_ = sub.Close() // no more dispatches once it returns
			return
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("cannot consume operation replies; retrying", "topic", topic, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// onReply takes one reply message of an operation, on its lane; true
// acknowledges it. What comes from the bus is checked: the id is an
// operation of the table and running, the payload a response, the replies
// in sequence.
func (m *Manager) onReply(l *replyLane, msg transport.Message) bool {
	id := msg.Properties[wire.PropID]
	if !validID(id) {
		m.log.Warn("operation reply without a valid id dropped", "id", id)
		return true
	}
	made, here := m.opts.Keys.madeHere(id)
	if !here && len(id) == idLen {
		// No key held here made this id: its record cannot be read here
		// (another deployment's reply, on a topic it shares).
		m.quiet.Warn("a reply for an operation no key of this gateway made dropped; is another deployment using this reply topic?", "id", id)
		return true
	}
	r, ok := m.recordOf(id)
	if !ok {
		if here && time.Since(made) < unseenFor && !m.deleted(id) {
			return false // made here a moment ago: the table lags
		}
		if msg.Redeliveries >= maxRedeliveries {
			m.log.Warn("reply for an operation no table shows dropped", "id", id, "deliveries", msg.Redeliveries+1)
			return true
		}
		return false // the table may lag: deliver it again
	}
	if r.Finished() {
		delete(l.partial, id)
		return true
	}
	if !msg.PublishTime.IsZero() && msg.PublishTime.UnixMilli() > r.DeadlineMS+deadlineSlackMS {
		// Sent after the deadline: the deadline's failure is the end
		// (deadlineEnd). One sent in time is recorded however late the
		// broker delivers it (a restart), while no end is recorded.
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := l.partial[id]
	if p == nil {
		p = &partial{}
		if s := msg.Properties[wire.PropSeq]; s != "" && s != "0" {
			// Replies of this operation went to another gateway before
			// (it stopped): the chunks it kept are the answer so far.
			if err := m.rejoin(ctx, r, p); err != nil {
				m.log.Warn("cannot read the chunks kept of an operation taken over; the reply will come again", "id", id, "err", err)
				return false
			}
		}
		l.partial[id] = p
	}
	end := func(st State, out string, f *Failure) bool {
		if _, err := m.finish(ctx, id, st, out, f, p.written); err != nil {
			m.log.Warn("cannot record an operation's end; the reply will come again", "id", id, "err", err)
			return false
		}
		delete(l.partial, id)
		return true
	}
	resp, err := wire.DecodeResponse(msg.Payload)
	if err != nil {
		return end(Failed, "", &Failure{Reason: ReasonBadReply, Message: "the tool service sent a malformed reply"})
	}
	seq := -1
	if s := msg.Properties[wire.PropSeq]; s != "" {
		n, err := strconv.Atoi(s)
		switch {
		case err != nil:
			return end(Failed, "", &Failure{Reason: ReasonBadReply, Message: "the tool service sent a malformed reply"})
		case n < p.next:
			return true // a replay
		case n > p.next:
			return end(Failed, "", &Failure{Reason: ReasonLost, Message: fmt.Sprintf("%d reply message(s) of this operation were lost", n-p.next)})
		}
		seq = n
	}
	if resp.Error != nil {
		return end(Failed, "", &Failure{Type: resp.Error.Type, Message: resp.Error.Message})
	}
	if p.sb.Len()+len(resp.Response) > m.opts.MaxOutput {
		return end(Failed, "", &Failure{Reason: ReasonTooLarge, Message: fmt.Sprintf("the output is larger than the %d bytes an operation keeps", m.opts.MaxOutput)})
	}
	// An answer in several messages is kept chunk by chunk for Stream; one
	// in a single message is all in the record.
	if !resp.EndOfStream || p.written > 0 {
		if err := m.writeChunk(ctx, id, p.written, resp.Response, resp.EndOfStream); err != nil {
			m.log.Warn("cannot keep a chunk of an operation's answer; the reply will come again", "id", id, "chunk", p.written, "err", err)
			return false
		}
		p.written++
	}
	if seq >= 0 {
		p.next = seq + 1
	}
	p.sb.WriteString(resp.Response)
	if !resp.EndOfStream {
		return true
	}
	return end(Done, p.sb.String(), nil)
}

type partial struct {
	sb      strings.Builder
	next    int // the sequence number due next
	written int // chunks written to the chunk topic
}

// table.
func (m *Manager) recordOf(id string) (Record, bool) {
	t := time.NewTimer(lagWait)
	defer t.Stop()
	for {
		r, ok, changed := m.lookup(id)
		if ok {
			return r, true
		}
		select {
		case <-changed:
		case <-t.C:
			return Record{}, false
		}
	}
}
