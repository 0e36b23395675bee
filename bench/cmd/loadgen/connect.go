package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/gen/toolgate/v1/toolgatev1connect"
	"google.golang.org/protobuf/types/known/structpb"
)

// connectCaller calls the gateway's Connect door on its HTTP listener, as
// a browser or a Connect client does: the Connect protocol with JSON
// bodies (or gRPC-Web), one keep-alive connection per worker.
type connectCaller struct {
	client  toolgatev1connect.ToolServiceClient
	http    *http.Client
	auth    string
	tool    string
	want    string
	args    *structpb.Struct
	stream  bool
	streamN int
}

func newConnect(o Options, msg string, stream, grpcWeb bool) (*connectCaller, error) {
	c := &connectCaller{http: newHTTPClient(o), tool: o.Tool, want: msg, stream: stream, streamN: o.StreamN}
	opts := []connect.ClientOption{connect.WithProtoJSON()}
	if grpcWeb {
		opts = []connect.ClientOption{connect.WithGRPCWeb()}
	}
	c.client = toolgatev1connect.NewToolServiceClient(c.http, "http://"+o.HTTPAddr, opts...)
	if o.APIKey != "" {
		c.auth = "Bearer " + o.APIKey
	}
	a := map[string]any{"msg": msg}
	if stream {
		a = map[string]any{"mode": "stream", "n": o.StreamN}
	}
	var err error
	if c.args, err = structpb.NewStruct(a); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *connectCaller) Call(ctx context.Context, _ int) (int, error) {
	if !c.stream {
		req := connect.NewRequest(&toolgatev1.InvokeToolRequest{Name: c.tool, Arguments: c.args})
		if c.auth != "" {
			req.Header().Set("Authorization", c.auth)
		}
		resp, err := c.client.InvokeTool(ctx, req)
		if err != nil {
			return 0, err
		}
		if resp.Msg.GetOutput() != c.want {
			return 1, errors.New("reply differs from the message sent")
		}
		return 1, nil
	}
	req := connect.NewRequest(&toolgatev1.StreamToolRequest{Name: c.tool, Arguments: c.args})
	if c.auth != "" {
		req.Header().Set("Authorization", c.auth)
	}
	st, err := c.client.StreamTool(ctx, req)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	n := 0
	for st.Receive() {
		if st.Msg().GetIndex() != int64(n) {
			return n, fmt.Errorf("chunk %d has index %d", n, st.Msg().GetIndex())
		}
		n++
	}
	if err := st.Err(); err != nil {
		return n, err
	}
	if n != c.streamN {
		return n, fmt.Errorf("got %d chunks, want %d", n, c.streamN)
	}
	return n, nil
}

func (c *connectCaller) Close() { c.http.CloseIdleConnections() }
