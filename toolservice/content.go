package toolservice

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/wire"
)

// ResultMCPContent is the Tool.Result of a tool whose output is MCP
// content: its reply (the chunks it sends, joined) is a JSON array of MCP
// content blocks, which Content writes, and it may send log records with
// Request.Log. A gateway's MCP door returns the blocks as the tool
// result's content and sends the log records to the clients that asked
// for them; REST, gRPC and Connect return the reply as it is. It is
// wire.ResultMCPContent.
const ResultMCPContent = wire.ResultMCPContent

// ContentBlock is one MCP content block: text, an image, audio, an
// embedded resource or a link to a resource. Make one with TextContent,
// ImageContent, AudioContent, ResourceContent, BlobResourceContent or
// ResourceLinkContent; the zero value is no block, which Content refuses.
type ContentBlock struct {
	kind     string // the MCP type: text, image, audio, resource, resource_link
	text     string // text; an embedded resource's text
	data     []byte // image or audio data; an embedded resource's blob
	blob     bool   // an embedded resource holds data, not text
	mimeType string
	uri      string // of a resource
	name     string // of a resource link
}

// TextContent is a block of text.
func TextContent(text string) ContentBlock {
	return ContentBlock{kind: "text", text: text}
}

// ImageContent is an image: its bytes (sent base64-encoded) and MIME type
// ("image/png").
func ImageContent(data []byte, mimeType string) ContentBlock {
	return ContentBlock{kind: "image", data: data, mimeType: mimeType}
}

// AudioContent is a piece of audio: its bytes (sent base64-encoded) and
// MIME type ("audio/wav").
func AudioContent(data []byte, mimeType string) ContentBlock {
	return ContentBlock{kind: "audio", data: data, mimeType: mimeType}
}

// ResourceContent is a resource embedded in the result: its URI, its MIME
// type ("" if unknown) and its text.
func ResourceContent(uri, mimeType, text string) ContentBlock {
	return ContentBlock{kind: "resource", uri: uri, mimeType: mimeType, text: text}
}

// BlobResourceContent is a binary resource embedded in the result: its
// URI, its MIME type ("" if unknown) and its bytes (sent base64-encoded).
func BlobResourceContent(uri, mimeType string, blob []byte) ContentBlock {
	return ContentBlock{kind: "resource", uri: uri, mimeType: mimeType, data: blob, blob: true}
}

// ResourceLinkContent is a link to a resource the client may read: its
// URI, a name for it, and its MIME type ("" if unknown).
func ResourceLinkContent(uri, name, mimeType string) ContentBlock {
	return ContentBlock{kind: "resource_link", uri: uri, name: name, mimeType: mimeType}
}

// check reports what keeps b from being a block MCP accepts (the gateway
// refuses the same).
func (b ContentBlock) check() error {
	switch b.kind {
	case "":
		return errors.New("an empty ContentBlock (make blocks with TextContent, ImageContent, …)")
	case "image", "audio":
		if len(b.data) == 0 {
			return fmt.Errorf("%s content has no data", b.kind)
		}
		if b.mimeType == "" {
			return fmt.Errorf("%s content has no MIME type", b.kind)
		}
	case "resource":
		if b.uri == "" {
			return errors.New("an embedded resource has no URI")
		}
		if b.blob && len(b.data) == 0 || !b.blob && b.text == "" {
			return errors.New("an embedded resource is empty")
		}
	case "resource_link":
		if b.uri == "" || b.name == "" {
			return errors.New("a resource link needs a URI and a name")
		}
	}
	return nil
}

// MarshalJSON writes b as the MCP content block it is.
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	switch b.kind {
	case "image", "audio":
		return json.Marshal(struct {
			Type     string `json:"type"`
			Data     string `json:"data"`
			MIMEType string `json:"mimeType"`
		}{b.kind, base64.StdEncoding.EncodeToString(b.data), b.mimeType})
	case "resource":
		r := struct {
			URI      string  `json:"uri"`
			MIMEType string  `json:"mimeType,omitempty"`
			Text     *string `json:"text,omitempty"`
			Blob     *string `json:"blob,omitempty"`
		}{URI: b.uri, MIMEType: b.mimeType}
		if b.blob {
			s := base64.StdEncoding.EncodeToString(b.data)
			r.Blob = &s
		} else {
			r.Text = &b.text
		}
		return json.Marshal(struct {
			Type     string `json:"type"`
			Resource any    `json:"resource"`
		}{b.kind, r})
	case "resource_link":
		return json.Marshal(struct {
			Type     string `json:"type"`
			URI      string `json:"uri"`
			Name     string `json:"name"`
			MIMEType string `json:"mimeType,omitempty"`
		}{b.kind, b.uri, b.name, b.mimeType})
	}
	return json.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{b.kind, b.text})
}

// Content is the reply of a tool whose Result is ResultMCPContent: the
// blocks, in order, as the JSON array MCP clients receive as the result's
// content. A handler returns it as it is:
//
//	return toolservice.Content(toolservice.TextContent("a red dot:"), toolservice.ImageContent(png, "image/png"))
//
// It fails when a block is not one MCP accepts (an image without data or
// MIME type, a resource without URI, the zero ContentBlock).
func Content(blocks ...ContentBlock) (string, error) {
	for i, b := range blocks {
		if err := b.check(); err != nil {
			return "", fmt.Errorf("toolservice: content[%d]: %w", i, err)
		}
	}
	if blocks == nil {
		blocks = []ContentBlock{}
	}
	out, err := json.Marshal(blocks)
	if err != nil {
		return "", fmt.Errorf("toolservice: content: %w", err)
	}
	return string(out), nil
}

// LogLevel is the severity of a log record: the syslog severities of RFC
// 5424, as MCP names them.
type LogLevel string

// The log levels, least severe first.
const (
	LogDebug     LogLevel = "debug"
	LogInfo      LogLevel = "info"
	LogNotice    LogLevel = "notice"
	LogWarning   LogLevel = "warning"
	LogError     LogLevel = "error"
	LogCritical  LogLevel = "critical"
	LogAlert     LogLevel = "alert"
	LogEmergency LogLevel = "emergency"
)

func (l LogLevel) valid() bool {
	switch l {
	case LogDebug, LogInfo, LogNotice, LogWarning, LogError, LogCritical, LogAlert, LogEmergency:
		return true
	}
	return false
}

// Log sends a log record to the caller while the call runs: a chunk of
// the stream of its own, {"log": {"level": level, "data": data}}, where
// data is any value JSON can hold (a message, an object of fields). For a
// tool whose Result is ResultMCPContent, a gateway's MCP door sends it to
// the client as notifications/message when the client asked for records
// of that level, and leaves it out of the result's content; to REST, gRPC
// and Connect it is a chunk like any other. Log fails as Send does, and
// on an unknown level or data JSON cannot encode.
func (r *Request) Log(level LogLevel, data any) error {
	if !level.valid() {
		return fmt.Errorf("toolservice: log level %q is not one of debug, info, notice, warning, error, critical, alert, emergency", level)
	}
	type record struct {
		Level LogLevel `json:"level"`
		Data  any      `json:"data"`
	}
	b, err := json.Marshal(struct {
		Log record `json:"log"`
	}{record{level, data}})
	if err != nil {
		return fmt.Errorf("toolservice: log data: %w", err)
	}
	return r.Send(string(b))
}
