package bridge

import (
	"hash/maphash"
	"sync"
)

const shards = 64

// pendingMap maps correlation ids to waiting calls. It is sharded so that
// concurrent callers and the reply router rarely contend.
type pendingMap struct {
	seed   maphash.Seed
	shards [shards]struct {
		sync.Mutex
		m map[string]*Call
		_ [40]byte // keep shards on separate cache lines
	}
}

func (p *pendingMap) init() {
	p.seed = maphash.MakeSeed()
	for i := range p.shards {
		p.shards[i].m = map[string]*Call{}
	}
}

func (p *pendingMap) shard(id string) int {
	return int(maphash.String(p.seed, id) % shards)
}

func (p *pendingMap) store(id string, c *Call) {
	s := &p.shards[p.shard(id)]
	s.Lock()
	s.m[id] = c
	s.Unlock()
}

func (p *pendingMap) load(id string) *Call {
	s := &p.shards[p.shard(id)]
	s.Lock()
	c := s.m[id]
	s.Unlock()
	return c
}

func (p *pendingMap) delete(id string) {
	s := &p.shards[p.shard(id)]
	s.Lock()
	delete(s.m, id)
	s.Unlock()
}

// each calls f for every pending call, outside the shard locks.
func (p *pendingMap) each(f func(*Call)) {
	for _, c := range p.collect(func(*Call) bool { return true }) {
		f(c)
	}
}

// collect returns the pending calls keep keeps, gathered under the shard
// locks (keep must not take the call's lock).
func (p *pendingMap) collect(keep func(*Call) bool) []*Call {
	var out []*Call
	for i := range p.shards {
		s := &p.shards[i]
		s.Lock()
		for _, c := range s.m {
			if keep(c) {
				out = append(out, c)
			}
		}
		s.Unlock()
	}
	return out
}

// len counts pending calls.
func (p *pendingMap) len() int {
	n := 0
	for i := range p.shards {
		s := &p.shards[i]
		s.Lock()
		n += len(s.m)
		s.Unlock()
	}
	return n
}
