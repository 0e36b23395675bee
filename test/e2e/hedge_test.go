package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/wire"
)

// Bounds of TestFrozenAndKilledReplicas, the acceptance's: a call to a
// frozen replica's service is answered within answeredWithin (it is
// published again once it has heard nothing for the hedges' delay, 350 ms
// at first, then answered by the other replica in milliseconds), and a
// call a killed replica had ends within lostWithin of the kill (the watch
// asks the admin API every second). Both leave room for a loaded machine.
const (
	answeredWithin = time.Second
	lostWithin     = 2 * time.Second
	hedgeCallTime  = 3 * time.Second // each call's deadline
)

// TestFrozenAndKilledReplicas runs two replicas of the Go SDK echo
// service, as processes, on one request topic, behind the gateway's
// bridge (with the admin API's watch, as the gateway has it with
// --pulsar-admin-url).
//
// Frozen: one replica is stopped (SIGSTOP). It keeps its consumer, so the
// broker goes on handing it every other request, which it never answers.
// 100 sequential calls are all answered, each within answeredWithin: a
// call that hears nothing from its service — no receipt, no reply — is
// published again and answered by the other replica.
//
// Killed: the replica, woken, is killed (SIGKILL) while it has calls
// (they sleep 6 s; it sent their receipts). Those calls end with
// ErrInstanceLost within lostWithin of the kill, not at their deadline;
// the other replica's calls, and calls made meanwhile, are answered.
func TestFrozenAndKilledReplicas(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "echo-service")
	build := exec.Command("go", "build", "-o", bin, "./cmd/echo-service")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	name := brokertest.UniqueTopic("hedge-echo")
	target := bridge.Target{RequestTopic: wire.RequestTopic(name), ResponseTopic: wire.ResponseTopic(name)}
	frozen := startReplica(t, bin, name)
	startReplica(t, bin, name)
	eventually.True(t, 30*time.Second, "both replicas on the request topic", func() bool {
		return brokertest.Subscriptions(target.RequestTopic) == 2
	})

	log := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pb, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pb.Close)
	admin := pulsarbroker.NewAdminPresence(brokertest.AdminURL(), log)
	b := bridge.New(pb, bridge.Options{ReplyTopic: wire.ReplyTopic(brokertest.UniqueTopic("hedge-gw")), Presence: admin, Watch: admin, Logger: log})
	t.Cleanup(b.Close)
	if err := b.ListenAll(t.Context(), func() []string { return []string{target.ResponseTopic} }); err != nil {
		t.Fatal(err)
	}
	// call makes a call; its end, and when, come on the channel.
	call := func(args string, timeout time.Duration) <-chan callOver {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		c, err := b.Call(ctx, target, wire.Request{Config: "{}", Arguments: args}, bridge.CallOptions{Deadline: time.Now().Add(timeout)})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		done := make(chan callOver, 1)
		go func() {
			defer cancel()
			defer c.Close()
			_, err := c.Wait(ctx)
			done <- callOver{err, time.Now()}
		}()
		return done
	}
	// The first replies name their instances: the calls from here on ask
	// for receipts.
	for i := range 2 {
		if over := <-call(fmt.Sprintf(`{"msg":"warm-up %d"}`, i), hedgeCallTime); over.err != nil {
			t.Fatalf("warm-up call: %v", over.err)
		}
	}

	t.Run("frozen", func(t *testing.T) {
		if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = frozen.cmd.Process.Signal(syscall.SIGCONT) }()
		hedged := b.Stats().Hedged
		var took []time.Duration
		failed := 0
		for i := range 100 {
			start := time.Now()
			over := <-call(fmt.Sprintf(`{"msg":"call %d"}`, i), hedgeCallTime)
			err, d := over.err, over.at.Sub(start)
			took = append(took, d)
			if err != nil || d > answeredWithin {
				failed++
				t.Errorf("call %d: %v after %v, want an answer within %v", i, err, d.Round(time.Millisecond), answeredWithin)
				if failed == 3 {
					t.FailNow() // each would take its deadline
				}
			}
		}
		slices.Sort(took)
		t.Logf("100 calls with one of two replicas frozen: p50 %v, p90 %v, max %v; %d published again",
			took[49].Round(time.Millisecond), took[89].Round(time.Millisecond), took[99].Round(time.Millisecond), b.Stats().Hedged-hedged)
	})

	t.Run("killed", func(t *testing.T) {
		// Four slow calls, one after the other (each in a batch of its
		// own): the broker hands them to the replicas in turn.
		receipts := b.Stats().Receipts
		var calls []<-chan callOver
		for i := range 4 {
			calls = append(calls, call(fmt.Sprintf(`{"mode":"sleep","ms":6000,"msg":"slow %d"}`, i), 20*time.Second))
		}
		eventually.True(t, 10*time.Second, "a receipt for each slow call", func() bool { return b.Stats().Receipts >= receipts+4 })
		eventually.True(t, 10*time.Second, "the watch seeing both replicas", func() bool {
			return len(b.WatchedInstances(target.RequestTopic)) == 2
		})
		// Calls made while the replica dies, one every 20 ms, are answered.
		stop := make(chan struct{})
		var (
			quick     sync.WaitGroup
			meanwhile int
		)
		quick.Go(func() {
			pace := time.NewTicker(20 * time.Millisecond)
			defer pace.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					meanwhile = i
					return
				case <-pace.C:
				}
				start := time.Now()
				over := <-call(fmt.Sprintf(`{"msg":"meanwhile %d"}`, i), hedgeCallTime)
				if d := over.at.Sub(start); over.err != nil || d > answeredWithin {
					t.Errorf("a call made while a replica died: %v after %v", over.err, d.Round(time.Millisecond))
				}
			}
		})
		killed := time.Now()
		if err := frozen.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		lost, answered := 0, 0
		for i, done := range calls {
			select {
			case over := <-done:
				err, after := over.err, over.at.Sub(killed)
				switch {
				case err == nil:
					answered++
					t.Logf("slow call %d answered %v after the kill", i, after.Round(time.Millisecond))
				case errors.Is(err, bridge.ErrInstanceLost) && after <= lostWithin:
					lost++
					t.Logf("slow call %d ended %v after the kill: %v", i, after.Round(time.Millisecond), err)
				default:
					t.Errorf("slow call %d ended %v after the kill with %v; want ErrInstanceLost within %v, or its answer",
						i, after.Round(time.Millisecond), err, lostWithin)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("slow call %d not over 20 s after the kill", i)
			}
		}
		close(stop)
		quick.Wait()
		t.Logf("%d calls made while the replica died, each answered within %v", meanwhile, answeredWithin)
		if lost == 0 || answered == 0 {
			t.Errorf("%d slow calls ended with their instance, %d answered; want some of each (the broker hands requests to the replicas in turn)", lost, answered)
		}
		if n := b.Stats().InstanceLost; n != int64(lost) {
			t.Errorf("Stats.InstanceLost %d, want %d", n, lost)
		}
	})
}

// callOver is how a call ended, and when.
type callOver struct {
	err error
	at  time.Time
}

// replica is a tool service process.
type replica struct {
	cmd  *exec.Cmd
	logs *strings.Builder
}

// startReplica starts the echo service at bin on topic, without
// announcements, and kills it when the test ends (logging its output if
// the test failed).
func startReplica(t *testing.T, bin, topic string) *replica {
	t.Helper()
	r := &replica{cmd: exec.Command(bin, "--pulsar-url", brokertest.PulsarURL(), "--topic", topic, "--announce=false"), logs: &strings.Builder{}}
	var mu sync.Mutex
	w := lockedWriter{mu: &mu, w: r.logs}
	r.cmd.Stdout, r.cmd.Stderr = w, w
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			mu.Lock()
			t.Logf("replica %d log:\n%s", r.cmd.Process.Pid, r.logs.String())
			mu.Unlock()
		}
	})
	return r
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// tWriter writes log lines to the test's log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
