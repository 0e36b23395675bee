package toolservice

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// Cancellation: a caller that gives a call up says so (wire.CreditCancel)
// on the stream's flow topic, or, when it does not know which instance
// has the call, on the service's cancel topic (wire.CancelTopic), which
// every instance reads on a subscription of its own. The instance that
// runs the call ends its handler's context with ErrCallerGone as the
// cause; one that has the request still queued drops it when its turn
// comes (the cancel can overtake the request: they travel on different
// topics); the others forget the cancel after cancelKeep.

const (
	callShards = 16
	// cancelKeep is how long a cancel for a call this instance has not
	// started is kept, in case the request is still on its way.
	cancelKeep = 2 * time.Minute
	// cancelsMax bounds the cancels kept per shard.
	cancelsMax = 4096
)

// calls holds the calls running on this instance and the cancels that
// came before their request.
type calls struct {
	seed   maphash.Seed
	shards [callShards]struct {
		sync.Mutex
		running map[string]context.CancelCauseFunc
		early   map[string]time.Time // call id → when its cancel came
		pruned  time.Time            // when early was last rid of old cancels
		_       [8]byte
	}
}

func (t *calls) init() {
	t.seed = maphash.MakeSeed()
	for i := range t.shards {
		t.shards[i].running = map[string]context.CancelCauseFunc{}
		t.shards[i].early = map[string]time.Time{}
	}
}

// start records a call about to run, with the function that ends its
// context. It reports false when the call was cancelled already.
func (t *calls) start(id string, cancel context.CancelCauseFunc) bool {
	s := &t.shards[maphash.String(t.seed, id)%callShards]
	s.Lock()
	defer s.Unlock()
	if _, gone := s.early[id]; gone {
		delete(s.early, id)
		return false
	}
	s.running[id] = cancel
	return true
}

// end forgets a call that has returned.
func (t *calls) end(id string) {
	s := &t.shards[maphash.String(t.seed, id)%callShards]
	s.Lock()
	delete(s.running, id)
	s.Unlock()
}

// cancel ends the call's context if it runs here, and otherwise keeps the
// cancel for a while in case its request is still to come. It reports
// whether the call ran here.
func (t *calls) cancel(id string, now time.Time) bool {
	s := &t.shards[maphash.String(t.seed, id)%callShards]
	s.Lock()
	fn, ok := s.running[id]
	if ok {
		delete(s.running, id)
	} else {
		// Most such cancels are for calls another instance runs, or
		// that ended here already: old ones go.
		if now.Sub(s.pruned) > cancelKeep/2 {
			for k, at := range s.early {
				if now.Sub(at) > cancelKeep {
					delete(s.early, k)
				}
			}
			s.pruned = now
		}
		for k := range s.early { // still full: forget any
			if len(s.early) < cancelsMax {
				break
			}
			delete(s.early, k)
		}
		s.early[id] = now
	}
	s.Unlock()
	if ok {
		fn(ErrCallerGone)
	}
	return ok
}
