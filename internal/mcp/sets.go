package mcp

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/toolgate/toolgate/internal/toolcall"
)

// SetInfo is what a tool set's MCP server says of itself.
type SetInfo struct {
	Title, Instructions string
}

// Sets serves each tool set as an MCP server of its own at /mcp/{set}
// (the path value "set"): its name and instructions in initialize and
// server/discover, its tools alone in tools/list, any other tool an
// unknown one. A set's server is made when it is first asked for, and
// again when the set's title or instructions change; a set the registry
// does not hold is 404.
type Sets struct {
	h      toolcall.Handler
	opts   func(set string) Options
	lookup func(set string) (SetInfo, bool)

	mu      sync.Mutex
	servers map[string]*setServer
}

type setServer struct {
	info SetInfo
	srv  *Server
}

// NewSets serves the sets lookup finds through h, each with the Options
// opts gives for it (Name, Instructions and Set are filled in).
func NewSets(h toolcall.Handler, opts func(set string) Options, lookup func(set string) (SetInfo, bool)) *Sets {
	return &Sets{h: h, opts: opts, lookup: lookup, servers: map[string]*setServer{}}
}

// ServeHTTP serves /mcp/{set}.
func (s *Sets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("set")
	srv := s.server(name)
	if srv == nil {
		writeRefusal(w, http.StatusNotFound, nullID, reasonError(codeInvalidRequest, "TOOL_SET_NOT_FOUND", "no tool set "+strconv.Quote(name)+" is served here"))
		return
	}
	srv.ServeHTTP(w, r)
}

func (s *Sets) server(name string) *Server {
	info, ok := s.lookup(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		delete(s.servers, name)
		return nil
	}
	if cur := s.servers[name]; cur != nil && cur.info == info {
		return cur.srv
	}
	o := s.opts(name)
	o.Name, o.Instructions, o.Set = info.Title, info.Instructions, name
	srv := New(s.h, o)
	s.servers[name] = &setServer{info: info, srv: srv}
	return srv
}

// ToolsChanged tells every set's listeners that the tool list changed
// (Server.ToolsChanged), and forgets the servers of sets that are gone.
func (s *Sets) ToolsChanged() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, cur := range s.servers {
		if _, ok := s.lookup(name); !ok {
			delete(s.servers, name)
			continue
		}
		cur.srv.ToolsChanged()
	}
}
