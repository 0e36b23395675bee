// Package registry holds the two-tier model of what can be called: tool
// services (where a request goes: topics, configuration parameters) and
// tools (what a caller sees: name, description, arguments, and the
// configuration values passed to the service). It parses and validates
// descriptor files and publishes immutable snapshots that readers load
// without locks. It knows nothing of Pulsar messages or gRPC.
package registry

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// Service is a tool service descriptor.
type Service struct {
	// ID identifies the service; tools name it in their "service" field.
	ID string
	// RequestTopic and ResponseTopic are full Pulsar topic names.
	RequestTopic  string
	ResponseTopic string
	// Params are the configuration parameters the service takes.
	Params []Param
	// Timeout is the default deadline of a call; 0 means the gateway's.
	Timeout time.Duration
	// Origin says which kind of source defined it ("" when parsed alone).
	Origin Origin
}

// Param is one configuration parameter of a service.
type Param struct {
	Name     string
	Required bool
}

// Argument is one argument of a tool.
type Argument struct {
	Name        string
	Type        string
	Description string
	Required    bool
}

// Tool is a tool descriptor, resolved against its service.
type Tool struct {
	// Key is the descriptor's key in the "tool" section.
	Key         string
	Name        string
	Description string
	Service     *Service
	// Config holds the values of the service's declared parameters that
	// the descriptor sets, with their JSON types.
	Config map[string]any
	// ConfigJSON is Config encoded once, as the envelope carries it.
	ConfigJSON string
	Arguments  []Argument
	// Strict tools reject arguments they do not declare.
	Strict bool
	// TaskSupport says whether an MCP client that negotiated the tasks
	// extension gets a task for a call of the tool (descriptor key
	// "task-support"): TaskForbidden (the default, a plain result),
	// TaskOptional (a task when the client can take one) or TaskRequired
	// (only as a task).
	TaskSupport string
	// Result says what the tool's output is (descriptor key "result"):
	// ResultText (the default, "text": text, as every door returns it) or
	// ResultMCPContent ("mcp-content": a JSON array of MCP content blocks,
	// which the MCP door returns as the result's content, and whose log
	// records it sends as notifications/message; the other doors return
	// the output unchanged).
	Result string
	// Schema is a JSON Schema of the call's arguments object: the
	// descriptor's "input-schema" as given, else one built from Arguments.
	Schema map[string]any
	// InputSchema, set when the descriptor gives "input-schema" (instead of
	// "arguments"), checks a call's arguments.
	InputSchema *InputSchema
	// HeaderParams are the arguments the input schema marks with
	// x-mcp-header, ordered by argument name.
	HeaderParams []HeaderParam
	// Origin says which kind of source defined it ("" when parsed alone).
	Origin Origin
}

// The values of Tool.TaskSupport.
const (
	TaskForbidden = ""
	TaskOptional  = "optional"
	TaskRequired  = "required"
)

// The values of Tool.Result.
const (
	ResultText       = ""
	ResultMCPContent = wire.ResultMCPContent
)

// Snapshot is one immutable, validated registry. Its methods are safe for
// concurrent use.
type Snapshot struct {
	// Source names where it was loaded from; LoadedAt says when.
	Source   string
	LoadedAt time.Time
	// Version counts the snapshots a Registry has published, from 1.
	Version int64

	tools      map[string]*Tool
	toolList   []*Tool // sorted by name
	services   map[string]*Service
	serviceIDs []string // sorted
	sets       map[string]*ToolSet
	gone       map[string]*Tool
}

func newSnapshot(source string, tools map[string]*Tool, services map[string]*Service) *Snapshot {
	s := &Snapshot{Source: source, LoadedAt: time.Now(), tools: tools, services: services}
	for _, t := range tools {
		s.toolList = append(s.toolList, t)
	}
	sort.Slice(s.toolList, func(i, j int) bool { return s.toolList[i].Name < s.toolList[j].Name })
	for id := range services {
		s.serviceIDs = append(s.serviceIDs, id)
	}
	sort.Strings(s.serviceIDs)
	return s
}

// Tool returns the tool with the given name.
func (s *Snapshot) Tool(name string) (*Tool, bool) {
	t, ok := s.tools[name]
	return t, ok
}

// Gone returns the tool with the given name when it is not served because
// every instance of its announced service let its lease run out (a crash):
// it is listed nowhere, and a call to it fails at once instead of waiting
// for a service that is not there.
func (s *Snapshot) Gone(name string) (*Tool, bool) {
	t, ok := s.gone[name]
	return t, ok
}

// Tools returns every tool, ordered by name. The slice must not be changed.
func (s *Snapshot) Tools() []*Tool { return s.toolList }

// Service returns the service with the given id.
func (s *Snapshot) Service(id string) (*Service, bool) {
	sv, ok := s.services[id]
	return sv, ok
}

// Services returns every service, ordered by id.
func (s *Snapshot) Services() []*Service {
	out := make([]*Service, len(s.serviceIDs))
	for i, id := range s.serviceIDs {
		out[i] = s.services[id]
	}
	return out
}

// Registry publishes the current snapshot. Readers call Snapshot once per
// call and use what they got to the end of the call.
type Registry struct {
	cur     atomic.Pointer[Snapshot]
	version atomic.Int64
}

// New returns a registry serving s.
func New(s *Snapshot) *Registry {
	r := &Registry{}
	r.Swap(s)
	return r
}

// Snapshot returns the current snapshot.
func (r *Registry) Snapshot() *Snapshot { return r.cur.Load() }

// Swap publishes s as the current snapshot.
func (r *Registry) Swap(s *Snapshot) {
	s.Version = r.version.Add(1)
	r.cur.Store(s)
}
