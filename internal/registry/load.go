package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// Problem is one thing wrong with a descriptor file.
type Problem struct {
	Section string // "tool-service", "tool" or "" for the file itself
	Key     string
	Reason  string
}

func (p Problem) String() string {
	switch {
	case p.Section == "":
		return p.Reason
	case p.Key == "":
		return p.Section + ": " + p.Reason
	default:
		return p.Section + "/" + p.Key + ": " + p.Reason
	}
}

// LoadError lists every problem found in one file.
type LoadError struct {
	Source   string
	Problems []Problem
}

func (e *LoadError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "registry %s: %d problem(s)", e.Source, len(e.Problems))
	for _, p := range e.Problems {
		sb.WriteString("\n  ")
		sb.WriteString(e.Source)
		sb.WriteString(": ")
		sb.WriteString(p.String())
	}
	return sb.String()
}

// ArgumentTypes are the argument types a tool may declare.
var ArgumentTypes = []string{"string", "number", "integer", "boolean", "object", "array"}

// LoadFile reads and validates a descriptor file (JSON or YAML), a
// regular file of at most DefaultMaxFileBytes.
func LoadFile(path string, log *slog.Logger) (*Snapshot, error) {
	data, err := readRegular(path, DefaultMaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	return Parse(filepath.Base(path), data, log)
}

// Parse validates a descriptor document shaped like TrustGraph's
// configuration: {"tool-service": {key: descriptor}, "tool": {key:
// descriptor}}. A descriptor may also be a string holding JSON, as
// TrustGraph's config store keeps them. Tools of other types than
// "tool-service" are skipped with one log line each. All problems are
// reported at once, as a *LoadError.
func Parse(source string, data []byte, log *slog.Logger) (*Snapshot, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fail := func(reason string) (*Snapshot, error) {
		return nil, &LoadError{Source: source, Problems: []Problem{{Reason: reason}}}
	}
	doc, err := decodeDocument(data)
	if err != nil {
		return fail(err.Error())
	}
	services, tools, probs := parseSections(source, doc, log)
	sets, setProbs := parseSets(unwrapConfig(doc))
	if probs = append(probs, setProbs...); len(probs) > 0 {
		return nil, &LoadError{Source: source, Problems: probs}
	}
	return newSnapshot(source, tools, services).withSets(sets), nil
}

// ParseDocument is Parse for a descriptor document that is already
// decoded, such as one a source assembled from separate values. Unlike
// Parse it keeps what is valid: it returns every valid service and tool
// together with the problems of the others.
func ParseDocument(source string, doc map[string]any, log *slog.Logger) (map[string]*Service, map[string]*Tool, []Problem) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Round-trip through JSON: numbers become json.Number, as Parse sees them.
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, []Problem{{Reason: "the document cannot be encoded as JSON: " + err.Error()}}
	}
	d, err := decodeDocument(b)
	if err != nil {
		return nil, nil, []Problem{{Reason: err.Error()}}
	}
	return parseSections(source, d, log)
}

// parseSections validates both sections. Invalid descriptors are left out
// and reported; a tool whose service is invalid is reported too.
func parseSections(source string, doc map[string]any, log *slog.Logger) (map[string]*Service, map[string]*Tool, []Problem) {
	doc = unwrapConfig(doc)
	var probs []Problem
	add := func(section, key, format string, args ...any) {
		probs = append(probs, Problem{Section: section, Key: key, Reason: fmt.Sprintf(format, args...)})
	}

	services := map[string]*Service{}
	svcSection, err := section(doc, "tool-service")
	if err != nil {
		add("tool-service", "", "%v", err)
	}
	for _, key := range sortedKeys(svcSection) {
		d, err := descriptor(svcSection[key])
		if err != nil {
			add("tool-service", key, "%v", err)
			continue
		}
		sv, errs := parseService(key, d)
		for _, e := range errs {
			add("tool-service", key, "%s", e)
		}
		if sv == nil {
			continue
		}
		if prev, dup := services[sv.ID]; dup {
			add("tool-service", key, "duplicate service id %q (also used by %s)", sv.ID, prev.RequestTopic)
			continue
		}
		services[sv.ID] = sv
	}

	tools := map[string]*Tool{}
	toolKeys := map[string]string{} // name → key
	toolSection, err := section(doc, "tool")
	if err != nil {
		add("tool", "", "%v", err)
	}
	for _, key := range sortedKeys(toolSection) {
		d, err := descriptor(toolSection[key])
		if err != nil {
			add("tool", key, "%v", err)
			continue
		}
		if typ, _ := d["type"].(string); typ != "tool-service" {
			log.Info("skipping tool of another type", "source", source, "tool", key, "type", d["type"])
			continue
		}
		t, errs := parseTool(key, d, services)
		for _, e := range errs {
			add("tool", key, "%s", e)
		}
		if t == nil {
			continue
		}
		if other, dup := toolKeys[t.Name]; dup {
			add("tool", key, "duplicate tool name %q (also defined by tool/%s)", t.Name, other)
			continue
		}
		toolKeys[t.Name] = key
		tools[t.Name] = t
	}
	return services, tools, probs
}

// unwrapConfig is the sections of a TrustGraph config dump
// ({"config": {...}}), else doc.
func unwrapConfig(doc map[string]any) map[string]any {
	if inner, ok := doc["config"].(map[string]any); ok && len(doc) == 1 {
		return inner
	}
	return doc
}

func decodeDocument(data []byte) (map[string]any, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("the file is empty")
	}
	var doc map[string]any
	if trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		return doc, nil
	}
	y, err := decodeYAML(trimmed)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	// decodeYAML gives what JSON decoding gives: YAML and JSON documents
	// look alike.
	if doc, _ = y.(map[string]any); doc == nil {
		return nil, errors.New("the document is not a mapping with tool-service and tool sections")
	}
	return doc, nil
}

func section(doc map[string]any, name string) (map[string]any, error) {
	v, ok := doc[name]
	if !ok || v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be a mapping of key to descriptor, not %s", jsonType(v))
	}
	return m, nil
}

func descriptor(v any) (map[string]any, error) {
	switch x := v.(type) {
	case map[string]any:
		return x, nil
	case string:
		dec := json.NewDecoder(strings.NewReader(x))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil || m == nil {
			return nil, fmt.Errorf("descriptor is a string but not a JSON object")
		}
		return m, nil
	default:
		return nil, fmt.Errorf("descriptor must be an object, not %s", jsonType(v))
	}
}

func parseService(key string, d map[string]any) (*Service, []string) {
	var errs []string
	sv := &Service{ID: key}
	if id, ok := d["id"]; ok {
		s, isStr := id.(string)
		if !isStr || s == "" {
			errs = append(errs, `"id" must be a non-empty string`)
		} else {
			sv.ID = s
		}
	}
	topic, hasTopic := d["topic"]
	rq, hasRQ := d["request-queue"]
	sq, hasSQ := d["response-queue"]
	switch {
	case hasRQ || hasSQ:
		if hasTopic {
			errs = append(errs, `give either "topic" or "request-queue"/"response-queue", not both`)
		}
		for _, q := range []struct {
			name string
			v    any
			has  bool
			dst  *string
		}{{"request-queue", rq, hasRQ, &sv.RequestTopic}, {"response-queue", sq, hasSQ, &sv.ResponseTopic}} {
			s, ok := q.v.(string)
			switch {
			case !q.has:
				errs = append(errs, fmt.Sprintf("%q is missing", q.name))
			case !ok || s == "":
				errs = append(errs, fmt.Sprintf("%q must be a non-empty string", q.name))
			default:
				full, err := wire.ExpandQueue(s)
				if err != nil {
					errs = append(errs, fmt.Sprintf("%q: %v", q.name, err))
				}
				*q.dst = full
			}
		}
	case hasTopic:
		s, ok := topic.(string)
		if !ok || s == "" {
			errs = append(errs, `"topic" must be a non-empty string`)
			break
		}
		sv.RequestTopic, sv.ResponseTopic = wire.RequestTopic(s), wire.ResponseTopic(s)
		if err := wire.ValidateTopic(sv.RequestTopic); err != nil {
			errs = append(errs, fmt.Sprintf(`"topic" %q is not a valid Pulsar topic name (letters, digits, _ . - = :)`, s))
		}
	default:
		errs = append(errs, `no topic: set "topic", or "request-queue" and "response-queue"`)
	}
	if v, ok := d["config-params"]; ok && v != nil {
		list, isList := v.([]any)
		if !isList {
			errs = append(errs, `"config-params" must be a list`)
		}
		seen := map[string]bool{}
		for i, p := range list {
			var prm Param
			switch x := p.(type) {
			case string:
				prm.Name = x
			case map[string]any:
				prm.Name, _ = x["name"].(string)
				if r, ok := x["required"]; ok {
					b, isBool := r.(bool)
					if !isBool {
						errs = append(errs, fmt.Sprintf(`config-params[%d]: "required" must be true or false`, i))
					}
					prm.Required = b
				}
			default:
				errs = append(errs, fmt.Sprintf(`config-params[%d] must be a name or an object {"name", "required"}`, i))
				continue
			}
			if prm.Name == "" {
				errs = append(errs, fmt.Sprintf("config-params[%d] has no name", i))
				continue
			}
			if seen[prm.Name] {
				errs = append(errs, fmt.Sprintf("config param %q is listed twice", prm.Name))
				continue
			}
			seen[prm.Name] = true
			sv.Params = append(sv.Params, prm)
		}
	}
	if v, ok := d["timeout"]; ok && v != nil {
		t, err := parseTimeout(v)
		if err != nil {
			errs = append(errs, err.Error())
		}
		sv.Timeout = t
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return sv, nil
}

// parseTimeout accepts a duration string ("30s", "1m") or a number of
// seconds.
func parseTimeout(v any) (time.Duration, error) {
	const bad = `"timeout" must be a positive duration such as "30s" or a number of seconds`
	var d time.Duration
	switch x := v.(type) {
	case string:
		var err error
		if d, err = time.ParseDuration(x); err != nil {
			return 0, errors.New(bad)
		}
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, errors.New(bad)
		}
		d = time.Duration(f * float64(time.Second))
	default:
		return 0, errors.New(bad)
	}
	if d <= 0 {
		return 0, errors.New(bad)
	}
	return d, nil
}

func parseTool(key string, d map[string]any, services map[string]*Service) (*Tool, []string) {
	var errs []string
	t := &Tool{Key: key, Name: key}
	if v, ok := d["name"]; ok {
		s, isStr := v.(string)
		if !isStr || strings.TrimSpace(s) == "" {
			errs = append(errs, `"name" must be a non-empty string`)
		} else {
			t.Name = s
		}
	}
	if strings.TrimSpace(t.Name) == "" {
		errs = append(errs, "the tool has an empty name")
	} else if strings.ContainsAny(t.Name, "/ \t\r\n?#%") {
		errs = append(errs, fmt.Sprintf("tool name %q may not contain '/', '?', '#', '%%' or white space", t.Name))
	}
	if v, ok := d["description"]; ok {
		t.Description, ok = v.(string)
		if !ok {
			errs = append(errs, `"description" must be a string`)
		}
	}
	if v, ok := d["strict"]; ok {
		t.Strict, ok = v.(bool)
		if !ok {
			errs = append(errs, `"strict" must be true or false`)
		}
	}
	if v, ok := d["task-support"]; ok {
		switch v {
		case "forbidden":
		case TaskOptional, TaskRequired:
			t.TaskSupport = v.(string)
		default:
			errs = append(errs, `"task-support" must be "forbidden", "optional" or "required"`)
		}
	}
	if v, ok := d["result"]; ok {
		switch v {
		case "text":
		case ResultMCPContent:
			t.Result = ResultMCPContent
		default:
			errs = append(errs, `"result" must be "text" or "`+ResultMCPContent+`"`)
		}
	}
	sid, _ := d["service"].(string)
	if sid == "" {
		errs = append(errs, `"service" must name a tool service`)
	} else if sv, ok := services[sid]; !ok {
		errs = append(errs, fmt.Sprintf("service %q is not defined in the tool-service section", sid))
	} else {
		t.Service = sv
		t.Config = map[string]any{}
		for _, p := range sv.Params {
			v, ok := d[p.Name]
			if !ok {
				if p.Required {
					errs = append(errs, fmt.Sprintf("service %q requires config param %q, which the tool does not set", sid, p.Name))
				}
				continue
			}
			t.Config[p.Name] = v
		}
		b, err := json.Marshal(t.Config)
		if err != nil {
			errs = append(errs, fmt.Sprintf("config values cannot be encoded: %v", err))
		}
		t.ConfigJSON = string(b)
	}
	if v, ok := d["arguments"]; ok && v != nil {
		list, isList := v.([]any)
		if !isList {
			errs = append(errs, `"arguments" must be a list`)
		}
		seen := map[string]bool{}
		for i, a := range list {
			m, isMap := a.(map[string]any)
			if !isMap {
				errs = append(errs, fmt.Sprintf("arguments[%d] must be an object", i))
				continue
			}
			var arg Argument
			arg.Name, _ = m["name"].(string)
			arg.Type, _ = m["type"].(string)
			arg.Description, _ = m["description"].(string)
			if r, ok := m["required"]; ok {
				b, isBool := r.(bool)
				if !isBool {
					errs = append(errs, fmt.Sprintf(`arguments[%d]: "required" must be true or false`, i))
				}
				arg.Required = b
			}
			switch {
			case arg.Name == "":
				errs = append(errs, fmt.Sprintf("arguments[%d] has no name", i))
				continue
			case seen[arg.Name]:
				errs = append(errs, fmt.Sprintf("argument %q is listed twice", arg.Name))
				continue
			case arg.Type == "":
				arg.Type = "string"
			case !validType(arg.Type):
				errs = append(errs, fmt.Sprintf("argument %q has unknown type %q (use one of %s)", arg.Name, arg.Type, strings.Join(ArgumentTypes, ", ")))
				continue
			}
			seen[arg.Name] = true
			t.Arguments = append(t.Arguments, arg)
		}
	}
	if v, ok := d["input-schema"]; ok {
		_, hasArgs := d["arguments"]
		switch {
		case hasArgs:
			errs = append(errs, `give either "input-schema" or "arguments", not both`)
		case t.Strict:
			errs = append(errs, `"strict" applies to "arguments": with "input-schema", say "additionalProperties": false in the schema`)
		default:
			var err error
			if t.InputSchema, t.Schema, t.HeaderParams, err = parseInputSchema(v); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if t.InputSchema == nil {
		t.Schema = schemaOf(t)
	}
	return t, nil
}

func validType(t string) bool {
	for _, x := range ArgumentTypes {
		if x == t {
			return true
		}
	}
	return false
}

// schemaOf builds the JSON Schema of a tool's arguments object.
func schemaOf(t *Tool) map[string]any {
	props := map[string]any{}
	required := []any{}
	for _, a := range t.Arguments {
		p := map[string]any{"type": a.Type}
		if a.Description != "" {
			p["description"] = a.Description
		}
		props[a.Name] = p
		if a.Required {
			required = append(required, a.Name)
		}
	}
	s := map[string]any{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"type":                 "object",
		"properties":           props,
		"additionalProperties": !t.Strict,
	}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}
