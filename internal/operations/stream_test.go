package operations

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/transport"
)

type emitted struct {
	i    int
	text string
	last bool
}

// stream runs Stream of alice's operation id from chunk from and returns
// what it emitted.
func stream(ctx context.Context, m *Manager, id string, from int) ([]emitted, Record, error) {
	var out []emitted
	r, err := m.Stream(ctx, "alice", id, from, func(i int, text string, last bool) error {
		out = append(out, emitted{i, text, last})
		return nil
	})
	return out, r, err
}

// An answer that came in one message is one chunk, emitted from chunk 0
// only.
func TestStreamOfAnAnswerInOneMessage(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{})
	r := putRunning(t, m, "alice")
	if _, err := m.finish(t.Context(), r.ID, Done, "whole", nil, 0); err != nil {
		t.Fatal(err)
	}
	got, rec, err := stream(t.Context(), m, r.ID, 0)
	if err != nil || len(got) != 1 || got[0] != (emitted{0, "whole", true}) || rec.State != Done {
		t.Fatalf("from 0: %v %+v %v", got, rec, err)
	}
	if got, _, err := stream(t.Context(), m, r.ID, 1); err != nil || len(got) != 0 {
		t.Fatalf("from 1: %v %v", got, err)
	}
	if _, _, err := stream(t.Context(), m, testID, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown operation: %v, want ErrNotFound", err)
	}
}

// The chunks kept on the chunk topic are emitted in order, each once,
// from the chunk asked for; a chunk written twice is emitted once, one
// that is not signed is refused, and a missing one ends the stream with
// ErrChunksLost.
func TestStreamOfChunks(t *testing.T) {
	t.Parallel()
	m, b := newTestManager(t, Options{})
	r := putRunning(t, m, "alice")
	for i, c := range []string{"a", "b", "c"} {
		if err := m.writeChunk(t.Context(), r.ID, i, c, i == 2); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			_ = m.writeChunk(t.Context(), r.ID, 0, "a", false) // written twice
			_ = b.Publish(t.Context(), DefaultChunkTopic, transport.Message{Key: r.ID, Payload: []byte("forged")})
		}
	}
	got, _, err := stream(t.Context(), m, r.ID, 1)
	if err != nil || len(got) != 2 || got[0] != (emitted{1, "b", false}) || got[1] != (emitted{2, "c", true}) {
		t.Fatalf("from 1: %v %v", got, err)
	}
	if n := m.Stats().Refused[RefusedUnsigned]; n != 1 {
		t.Fatalf("%d unsigned chunks refused, want 1", n)
	}

	lost := putRunning(t, m, "alice")
	_ = m.writeChunk(t.Context(), lost.ID, 0, "a", false)
	_ = m.writeChunk(t.Context(), lost.ID, 2, "c", true)
	if _, _, err := stream(t.Context(), m, lost.ID, 0); !errors.Is(err, ErrChunksLost) {
		t.Fatalf("a chunk missing: %v, want ErrChunksLost", err)
	}
}

// A stream of a running operation ends when the operation fails, after
// the chunks recorded before that.
func TestStreamEndsWithTheOperation(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Options{})
	r := putRunning(t, m, "alice")
	_ = m.writeChunk(t.Context(), r.ID, 0, "a", false)
	var text strings.Builder
	done := make(chan error, 1)
	go func() {
		rec, err := m.Stream(t.Context(), "alice", r.ID, 0, func(i int, s string, _ bool) error {
			text.WriteString(s)
			if i == 0 { // the first chunk is out: the operation fails now
				_, err := m.finish(context.Background(), r.ID, Failed, "", &Failure{Type: "ValueError"}, 1)
				return err
			}
			return nil
		})
		if err == nil && rec.State != Failed {
			err = errors.New("the record returned is " + string(rec.State))
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if text.String() != "a" {
		t.Fatalf("emitted %q", text.String())
	}
}
