package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A tool whose descriptor says "result": "mcp-content"
// (registry.ResultMCPContent) answers with MCP content: its output — the
// chunks of its reply, joined — is JSON, one array of content blocks
// (text, image, audio, resource, resource_link), which becomes the tool
// result's content, and any number of log records around it, each a JSON
// object with the single member "log":
//
//	{"log": {"level": "info", "logger": "db", "data": "connected"}}
//
// (level one of MCP's eight, logger optional, data any JSON value). A log
// record sent as a chunk of its own becomes a notifications/message while
// the call runs, when the request asked for records of its level
// (logThreshold); wherever it is, it is no part of the content. The other
// chunks keep their meaning: with a progressToken, each is a progress
// notification.
//
// The output comes from the bus, so nothing in it is trusted: every block
// must have a known type and the members that type requires, base64 where
// MCP says so. Anything else makes the call's result a tool error
// (BAD_CONTENT), the cause logged; nothing of a malformed output reaches
// the client as content.

// reasonBadContent is the error type of a tool result whose output is not
// MCP content.
const reasonBadContent = "BAD_CONTENT"

// The defaults of ContentBounds. The output of a tool of MCP content comes
// from the bus, and decoding it into blocks costs far more than its text
// (tens of times its size for many small blocks); a client decoding what
// the gateway forwards may fail on deep nesting (Python's json and
// pydantic recurse). The bounds are measured on the text, in one pass,
// before anything of it is decoded.
const (
	// DefaultMaxContentBlocks bounds the blocks of the content array:
	// more than a model's context makes use of.
	DefaultMaxContentBlocks = 1000
	// DefaultMaxContentDepth bounds the nesting of arrays and objects in
	// the output, counted from the content array (1) and a log record
	// (1): a block's _meta is at 3, a resource's at 4.
	DefaultMaxContentDepth = 64
	// DefaultMaxContentBytes bounds the output, the chunks of a stream
	// joined: a few large images.
	DefaultMaxContentBytes = 16 << 20
)

// ContentBounds bound the output of a tool of MCP content (and each log
// record sent while it runs). A zero field takes its default.
type ContentBounds struct {
	// Blocks is the most blocks the content array may hold
	// (DefaultMaxContentBlocks).
	Blocks int
	// Depth is the deepest the output may nest arrays and objects
	// (DefaultMaxContentDepth).
	Depth int
	// Bytes is the largest the output may be (DefaultMaxContentBytes).
	Bytes int
}

// orDefaults is b with its zero fields set to their defaults.
func (b ContentBounds) orDefaults() ContentBounds {
	if b.Blocks <= 0 {
		b.Blocks = DefaultMaxContentBlocks
	}
	if b.Depth <= 0 {
		b.Depth = DefaultMaxContentDepth
	}
	if b.Bytes <= 0 {
		b.Bytes = DefaultMaxContentBytes
	}
	return b
}

// errTooLarge is the breach of ContentBounds.Bytes.
func (b ContentBounds) errTooLarge(size int) error {
	return fmt.Errorf("the output is %d bytes, more than the %d bytes MCP content may be", size, b.Bytes)
}

// measure checks text — JSON values, one after another — against the
// bounds without decoding it: its size, how deeply it nests arrays and
// objects (strings skipped), and how many values the arrays at its top
// level hold. What is not JSON passes, for the decoder to refuse.
func (b ContentBounds) measure(text string) error {
	if len(text) > b.Bytes {
		return b.errTooLarge(len(text))
	}
	depth, blocks := 0, 0
	inString, escaped := false, false
	topArray := false // the value at the top level being read is an array
	expect := false   // the next value starts one of its blocks
	for i := 0; i < len(text); i++ {
		c := text[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case ',':
			expect = depth == 1 && topArray
			continue
		case '}', ']':
			depth, expect = max(depth-1, 0), false
			continue
		}
		if expect {
			if blocks++; blocks > b.Blocks {
				return fmt.Errorf("the content array holds more than %d blocks", b.Blocks)
			}
			expect = false
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > b.Depth {
				return fmt.Errorf("the output nests arrays and objects deeper than %d levels", b.Depth)
			}
			if depth == 1 {
				topArray = c == '['
				expect = topArray
			}
		}
	}
	return nil
}

// logLevels ranks MCP's log levels (RFC 5424's severities), least severe
// first.
var logLevels = map[string]int{
	"debug": 0, "info": 1, "notice": 2, "warning": 3, "error": 4, "critical": 5, "alert": 6, "emergency": 7,
}

// statelessLogLevel is the level of the log records sent in answer to
// requests of revisions before 2026-07-28. The endpoint is stateless: a
// level set by logging/setLevel is gone with its POST, so every request
// is one from a client that set none — for which the protocol lets the
// server choose what to send — and gets records of this level and above,
// as the Go SDK's stateless sessions do.
const statelessLogLevel = "info"

// logThreshold is the least severe level of the log records a tools/call
// with this _meta wants, "" for none. From protocol 2026-07-28 it is the
// request's own _meta io.modelcontextprotocol/logLevel, and without one
// (or with one that is not a level) no record is sent, as SEP-2575 asks;
// before, statelessLogLevel.
func logThreshold(meta map[string]any, modern bool) string {
	if !modern {
		return statelessLogLevel
	}
	l, _ := meta[sdk.MetaKeyLogLevel].(string)
	if _, ok := logLevels[l]; !ok {
		return ""
	}
	return l
}

// wantLog reports whether a record of level is sent to a request whose
// threshold is threshold.
func wantLog(level sdk.LoggingLevel, threshold string) bool {
	t, ok := logLevels[threshold]
	if !ok {
		return false
	}
	l, ok := logLevels[string(level)]
	return ok && l >= t
}

// logChunk returns the log record a stream chunk is, whole: ok is false
// for any other chunk, and for a malformed record or one beyond the
// bounds (which decodeContent reports once the output is complete).
func logChunk(text string, b ContentBounds) (*sdk.LoggingMessageParams, bool) {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "{") || !strings.HasSuffix(t, "}") || b.measure(t) != nil {
		return nil, false
	}
	rec, err := parseLog([]byte(t))
	return rec, err == nil
}

// parseLog reads raw, a JSON object, as a log record.
func parseLog(raw []byte) (*sdk.LoggingMessageParams, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	if len(top) != 1 || top["log"] == nil {
		return nil, errors.New(`a JSON object outside the content array that is not a log record ({"log": {"level": …, "data": …}})`)
	}
	rec, err := members(top["log"], "a log record's log")
	if err != nil {
		return nil, err
	}
	level, err := rec.text("level", true)
	if err != nil {
		return nil, fmt.Errorf("log record: %w", err)
	}
	if _, ok := logLevels[level]; !ok {
		return nil, fmt.Errorf("log record: level %q is not one of debug, info, notice, warning, error, critical, alert, emergency", level)
	}
	logger, err := rec.text("logger", false)
	if err != nil {
		return nil, fmt.Errorf("log record: %w", err)
	}
	data, ok := rec["data"]
	if !ok {
		return nil, errors.New("log record: no data")
	}
	return &sdk.LoggingMessageParams{Level: sdk.LoggingLevel(level), Logger: logger, Data: data}, nil
}

// decodeContent reads a tool's output as MCP content: the blocks of its
// one content array, its log records checked and left out — once the
// output is found within the bounds, before any of it is decoded.
func decodeContent(output string, b ContentBounds) ([]sdk.Content, error) {
	if err := b.orDefaults().measure(output); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(strings.NewReader(output))
	var blocks []sdk.Content
	found := false
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the output is not JSON: %w", err)
		}
		raw = bytes.TrimSpace(raw)
		switch raw[0] {
		case '{':
			if _, err := parseLog(raw); err != nil {
				return nil, err
			}
		case '[':
			if found {
				return nil, errors.New("the output holds more than one content array")
			}
			found = true
			if blocks, err = decodeBlocks(raw); err != nil {
				return nil, err
			}
		default:
			return nil, errors.New("the output holds a JSON value that is neither the content array nor a log record")
		}
	}
	if !found {
		return nil, errors.New(`the output holds no content array ([{"type": "text", "text": …}, …])`)
	}
	return blocks, nil
}

// decodeBlocks reads a JSON array of content blocks.
func decodeBlocks(raw json.RawMessage) ([]sdk.Content, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("the content array: %w", err)
	}
	blocks := make([]sdk.Content, 0, len(items))
	for i, item := range items {
		b, err := decodeBlock(item)
		if err != nil {
			return nil, fmt.Errorf("content[%d]: %w", i, err)
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// decodeBlock reads one content block: a known type and the members it
// requires; members of no concern to MCP are dropped.
func decodeBlock(raw json.RawMessage) (sdk.Content, error) {
	f, err := members(raw, "a content block")
	if err != nil {
		return nil, err
	}
	typ, err := f.text("type", true)
	if err != nil {
		return nil, err
	}
	ann, err := f.annotations()
	if err != nil {
		return nil, err
	}
	meta, err := f.meta()
	if err != nil {
		return nil, err
	}
	switch typ {
	case "text":
		text, err := f.text("text", true)
		if err != nil {
			return nil, fmt.Errorf("text: %w", err)
		}
		return &sdk.TextContent{Text: text, Meta: meta, Annotations: ann}, nil
	case "image", "audio":
		data, err := f.base64("data")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", typ, err)
		}
		mime, err := f.nonEmpty("mimeType")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", typ, err)
		}
		if typ == "audio" {
			return &sdk.AudioContent{Data: data, MIMEType: mime, Meta: meta, Annotations: ann}, nil
		}
		return &sdk.ImageContent{Data: data, MIMEType: mime, Meta: meta, Annotations: ann}, nil
	case "resource":
		r, err := decodeResource(f)
		if err != nil {
			return nil, fmt.Errorf("resource: %w", err)
		}
		return &sdk.EmbeddedResource{Resource: r, Meta: meta, Annotations: ann}, nil
	case "resource_link":
		l, err := decodeLink(f)
		if err != nil {
			return nil, fmt.Errorf("resource_link: %w", err)
		}
		l.Meta, l.Annotations = meta, ann
		return l, nil
	}
	return nil, fmt.Errorf("type %q is not one of text, image, audio, resource, resource_link", typ)
}

// decodeResource reads an embedded resource's contents: a URI and either
// text or a blob (base64), neither of them empty.
func decodeResource(f fields) (*sdk.ResourceContents, error) {
	raw, ok := f.present("resource")
	if !ok {
		return nil, errors.New("no resource")
	}
	r, err := members(raw, "resource")
	if err != nil {
		return nil, err
	}
	out := &sdk.ResourceContents{}
	if out.URI, err = r.nonEmpty("uri"); err != nil {
		return nil, err
	}
	if out.MIMEType, err = r.text("mimeType", false); err != nil {
		return nil, err
	}
	if out.Meta, err = r.meta(); err != nil {
		return nil, err
	}
	_, hasText := r.present("text")
	_, hasBlob := r.present("blob")
	switch {
	case hasText == hasBlob:
		return nil, errors.New("an embedded resource has either text or blob")
	case hasText:
		if out.Text, err = r.nonEmpty("text"); err != nil {
			return nil, err
		}
	default:
		if out.Blob, err = r.base64("blob"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeLink reads a resource link: a URI and a name, and what else MCP
// says of a resource.
func decodeLink(f fields) (*sdk.ResourceLink, error) {
	l := &sdk.ResourceLink{}
	var err error
	if l.URI, err = f.nonEmpty("uri"); err != nil {
		return nil, err
	}
	if l.Name, err = f.nonEmpty("name"); err != nil {
		return nil, err
	}
	for _, m := range []struct {
		name string
		dst  *string
	}{{"title", &l.Title}, {"description", &l.Description}, {"mimeType", &l.MIMEType}} {
		if *m.dst, err = f.text(m.name, false); err != nil {
			return nil, err
		}
	}
	if raw, ok := f.present("size"); ok {
		var n int64
		if json.Unmarshal(raw, &n) != nil || n < 0 {
			return nil, errors.New("size must be a whole number of bytes")
		}
		l.Size = &n
	}
	if raw, ok := f.present("icons"); ok {
		if err := json.Unmarshal(raw, &l.Icons); err != nil {
			return nil, errors.New("icons must be an array of icons ({src, mimeType, sizes, theme})")
		}
		for i, ic := range l.Icons {
			if ic.Source == "" {
				return nil, fmt.Errorf("icons[%d] has no src", i)
			}
		}
	}
	return l, nil
}

// fields are the members of a JSON object, by exact name.
type fields map[string]json.RawMessage

// members reads raw as a JSON object; what names it in errors.
func members(raw json.RawMessage, what string) (fields, error) {
	var f fields
	if err := json.Unmarshal(raw, &f); err != nil || f == nil {
		return nil, fmt.Errorf("%s must be a JSON object", what)
	}
	return f, nil
}

// present returns member name unless it is absent or null.
func (f fields) present(name string) (json.RawMessage, bool) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		return nil, false
	}
	return raw, true
}

// text returns string member name ("" when absent and not required).
func (f fields) text(name string, required bool) (string, error) {
	raw, ok := f.present(name)
	if !ok {
		if required {
			return "", fmt.Errorf("no %s", name)
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s must be a string", name)
	}
	return s, nil
}

// nonEmpty returns string member name, which must be there and not empty.
func (f fields) nonEmpty(name string) (string, error) {
	s, err := f.text(name, true)
	if err == nil && s == "" {
		err = fmt.Errorf("%s is empty", name)
	}
	return s, err
}

// base64 returns the bytes of member name, a non-empty base64 string.
func (f fields) base64(name string) ([]byte, error) {
	s, err := f.nonEmpty(name)
	if err != nil {
		return nil, err
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s is not base64", name)
	}
	return b, nil
}

// meta returns the _meta member, an object, if any.
func (f fields) meta() (sdk.Meta, error) {
	raw, ok := f.present("_meta")
	if !ok {
		return nil, nil
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, errors.New("_meta must be a JSON object")
	}
	return m, nil
}

// annotations returns the annotations member, if any: audience (user,
// assistant), priority (0 to 1), lastModified.
func (f fields) annotations() (*sdk.Annotations, error) {
	raw, ok := f.present("annotations")
	if !ok {
		return nil, nil
	}
	var a *sdk.Annotations
	if err := json.Unmarshal(raw, &a); err != nil || a == nil {
		return nil, errors.New("annotations must be an object of audience, priority, lastModified")
	}
	for _, r := range a.Audience {
		if r != "user" && r != "assistant" {
			return nil, fmt.Errorf("annotations: audience %q is not user or assistant", r)
		}
	}
	if a.Priority < 0 || a.Priority > 1 {
		return nil, errors.New("annotations: priority must be from 0 to 1")
	}
	return a, nil
}

// resultFormat is the result format of a tool (registry.ResultText for an
// unknown one).
func (s *Server) resultFormat(tool string) string {
	if s.opts.Result == nil {
		return registry.ResultText
	}
	return s.opts.Result(tool)
}

// toolResult is the tools/call result of a tool's output: its content
// blocks for a tool of MCP content, else one text content (result).
// shown is the tool's name as the caller knows it (in a tool set, the
// set's), for a refusal's message.
func (s *Server) toolResult(ctx context.Context, tool, shown, output string) *sdk.CallToolResult {
	if s.resultFormat(tool) != registry.ResultMCPContent {
		return result(output)
	}
	return s.contentResult(ctx, shown, output)
}

// contentResult is the tools/call result of the output of a tool of MCP
// content: its content blocks, or BAD_CONTENT.
func (s *Server) contentResult(ctx context.Context, tool, output string) *sdk.CallToolResult {
	blocks, err := decodeContent(output, s.bounds)
	if err != nil {
		return s.refuseContent(ctx, tool, err)
	}
	return &sdk.CallToolResult{Content: blocks}
}

// refuseContent is the BAD_CONTENT result of a tool whose output is not
// MCP content, the cause logged.
func (s *Server) refuseContent(ctx context.Context, tool string, cause error) *sdk.CallToolResult {
	s.log.WarnContext(ctx, "MCP tool answered with malformed content", "tool", tool, "err", cause)
	return badContent(tool, cause)
}

// badContent is the tool error result of a tool whose output is not MCP
// content.
func badContent(tool string, cause error) *sdk.CallToolResult {
	st := status.New(codes.Internal, fmt.Sprintf("tool %q answered with malformed MCP content: %v", tool, cause))
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reasonBadContent, Domain: toolcall.ErrorDomain,
		Metadata: map[string]string{"tool": tool}}); err == nil {
		st = ds
	}
	res, _ := callError(st.Err()) // a tool result: Internal is never a refusal
	return res
}
