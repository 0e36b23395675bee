package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The quota modes (grpc-quota-redis, rest-quota-redis) are the gRPC and
// REST points again on a gateway with quotas on and their counts in
// Redis: one rule covering the load generator's user on the echo tool,
// with a limit so large that no call is refused, so every call is one
// round trip to Redis more (the Lua script that checks and takes its
// window) and nothing else changes. They run next to their plain
// mode in every repetition and are read as a ratio to it in the same
// repetition. The Redis is one scripts/redis.sh starts on a free port for
// the run and stops at its end.

// quotaSuffix ends the name of a quota mode; the rest is its plain mode.
const quotaSuffix = "-quota-redis"

// quotaCallsPerHour is the rule's limit: far more than this machine
// serves in an hour, so that the quota never refuses during a run.
const quotaCallsPerHour = 1_000_000_000

// quotaKey is the Redis key of the rule's window for the load generator's
// user (internal/quota: toolgate:quota:<rule>:<subject>:calls).
const quotaKey = "toolgate:quota:bench-echo:api-key:bench:calls"

// plainMode is the mode a quota mode is measured against ("" when m is
// not a quota mode).
func plainMode(m string) string {
	base, ok := strings.CutSuffix(m, quotaSuffix)
	if !ok {
		return ""
	}
	return base
}

// quotaWanted says whether a quota mode is in the matrix.
func (e *env) quotaWanted() bool {
	return slices.ContainsFunc(e.cfg.Modes, func(m string) bool { return plainMode(m) != "" })
}

// redisServer is the run's Redis, started through scripts/redis.sh.
type redisServer struct {
	repo string
	port int
	url  string
}

func (r *redisServer) script(ctx context.Context, cmd string) (string, error) {
	c := exec.CommandContext(ctx, filepath.Join(r.repo, "scripts", "redis.sh"), cmd)
	c.Dir = r.repo
	c.Env = append(os.Environ(), "REDIS_PORT="+strconv.Itoa(r.port))
	// its own process group, so that a Ctrl-C reaches benchrun only, which
	// then stops the server
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.WaitDelay = 30 * time.Second
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/redis.sh %s: %w\n%s", cmd, err, lastLines(stderr.String(), 10))
	}
	return strings.TrimSpace(string(out)), nil
}

// startRedis starts a Redis on a free port, with nothing on disk.
func (e *env) startRedis(ctx context.Context) (*redisServer, error) {
	port, err := freeLowPort(nil)
	if err != nil {
		return nil, err
	}
	r := &redisServer{repo: e.repo, port: port}
	if r.url, err = r.script(ctx, "up"); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(r.url, "redis://") {
		_, _ = r.script(context.Background(), "down")
		return nil, fmt.Errorf("scripts/redis.sh up printed %q, not a Redis URL", r.url)
	}
	return r, nil
}

// do sends one command to the server and returns its reply: a simple
// string, an integer or a bulk string as text, "" for a nil bulk string.
func (r *redisServer) do(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(r.port), 3*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	req := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		req = fmt.Appendf(req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write(req); err != nil {
		return "", err
	}
	rd := bufio.NewReader(conn)
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("redis: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("redis: unexpected reply %q", line)
}

// checkQuotaCounted fails s unless the rule's window in Redis, emptied
// before the point, counted at least the calls s completed: the quota
// mode measured calls that went to Redis, not a rule that matched
// nothing.
func (e *env) checkQuotaCounted(s *Sample) {
	if s.Failed != "" || e.redis == nil {
		return
	}
	v, err := e.redis.do("GET", quotaKey)
	n, _ := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil:
		s.Failed = fmt.Sprintf("reading the quota's count in Redis: %v", err)
	case n < int64(s.Calls):
		s.Failed = fmt.Sprintf("Redis counted %d calls under the quota, the load generator completed %d", n, s.Calls)
	}
}

func (r *redisServer) stop() {
	if _, err := r.script(context.Background(), "down"); err != nil {
		logf("redis: %v", err)
	}
}

// writeQuotaRules writes the rules file of the quota modes: the load
// generator's user ("bench", its API key) on the echo tool.
func (e *env) writeQuotaRules() (string, error) {
	file := filepath.Join(e.tmp, "quota-rules.yaml")
	rules := fmt.Sprintf(`# generated by bench/cmd/benchrun: never refuses during a run
rules:
  - name: bench-echo
    users: ["api-key:bench"]
    tools: [echo]
    calls: %d
    per: hour
`, quotaCallsPerHour)
	return file, os.WriteFile(file, []byte(rules), 0o644)
}

// quotaArgs are the flags of a gateway of the quota modes. A store that
// fails refuses the calls (closed), so a Redis that is not answering shows
// as errors rather than as cheaper calls.
func (e *env) quotaArgs() ([]string, error) {
	if e.redis == nil {
		return nil, fmt.Errorf("no Redis for the quota modes: %w", e.redisErr)
	}
	return []string{"--quota-rules", e.quotaRules, "--quota-redis-url", e.redis.url, "--quota-redis-failure", "closed"}, nil
}

// QuotaRow is a quota mode beside its plain mode at one concurrency:
// medians over repetitions, and the ratios the medians of the
// per-repetition ratios.
type QuotaRow struct {
	Mode          string    `json:"mode"`
	Plain         string    `json:"plain"`
	Concurrency   int       `json:"concurrency"`
	Quota         FloorSide `json:"quota"`
	Without       FloorSide `json:"without"`
	CPURatio      *float64  `json:"cpu_vs_plain,omitempty"`
	CPURatios     []float64 `json:"cpu_vs_plain_per_repetition,omitempty"`
	MallocsRatio  *float64  `json:"mallocs_vs_plain,omitempty"`
	MallocsRatios []float64 `json:"mallocs_vs_plain_per_repetition,omitempty"`
}

// pairedRatios are, for each repetition in which both modes a and b have
// a figure f at concurrency c, f(a) ÷ f(b), in the order of the
// repetitions.
func pairedRatios(samples []*Sample, a, b string, c int, f func(*Sample) float64) []float64 {
	by := func(mode string) map[int]float64 {
		out := map[int]float64{}
		for _, s := range samples {
			if s.Mode == mode && s.Concurrency == c && s.Failed == "" && s.Gateway != nil {
				if v := f(s); v > 0 {
					out[s.Rep] = v
				}
			}
		}
		return out
	}
	fa, fb := by(a), by(b)
	var reps []int
	for rep := range fa {
		if _, ok := fb[rep]; ok {
			reps = append(reps, rep)
		}
	}
	slices.Sort(reps)
	var out []float64
	for _, rep := range reps {
		out = append(out, round(fa[rep]/fb[rep], 3))
	}
	return out
}

// summarizeQuota sets the quota rows and the ratios
// cpu_<mode>_vs_<plain>_c<c> and mallocs_<mode>_vs_<plain>_c<c>.
func (r *Report) summarizeQuota() {
	r.Quota = nil
	for _, m := range r.Config.Modes {
		plain := plainMode(m)
		if plain == "" {
			continue
		}
		for _, c := range r.Config.Concurrencies {
			q, p := find(r.Runs, m, c), find(r.Runs, plain, c)
			if q == nil || p == nil {
				continue
			}
			row := QuotaRow{Mode: m, Plain: plain, Concurrency: c, Quota: floorSide(q, nil), Without: floorSide(p, nil)}
			row.CPURatios = pairedRatios(r.Samples, m, plain, c, func(s *Sample) float64 { return s.Gateway.CPUSPer1kCall })
			row.MallocsRatios = pairedRatios(r.Samples, m, plain, c, func(s *Sample) float64 { return s.Gateway.MallocsPerCall })
			row.CPURatio, row.MallocsRatio = medianOf(row.CPURatios), medianOf(row.MallocsRatios)
			key := fmt.Sprintf("%s_vs_%s_c%d", strings.ReplaceAll(m, "-", "_"), plain, c)
			r.setRatio("cpu_"+key, row.CPURatio)
			r.setRatio("mallocs_"+key, row.MallocsRatio)
			r.Quota = append(r.Quota, row)
		}
	}
}

// quotaMarkdown is the quota modes' table.
func (r *Report) quotaMarkdown(b *strings.Builder) {
	if len(r.Quota) == 0 {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### Quotas in Redis\n\n")
	w("The *-quota-redis* rows are the same points on a gateway with `--quota-rules` (one rule: the load generator's user on the echo tool, %d calls an hour, never reached) and `--quota-redis-url` (a Redis started for the run by `scripts/redis.sh`, on this machine): every call also checks and takes its window in Redis, which is checked to have counted every call of the point. Each runs next to its plain mode; a ratio is the median of the per-repetition ratios (listed).\n\n", quotaCallsPerHour)
	w("| mode | c | CPU ms / call: quota | without | × (per repetition) | allocs / call: quota | without | × | p50 ms: quota | without | calls/s: quota | without |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range r.Quota {
		cpu := cell2(row.CPURatio)
		if len(row.CPURatios) > 0 {
			cpu += " (" + list2(row.CPURatios) + ")"
		}
		w("| %s | %d | %.3f | %.3f | %s | %.0f | %.0f | %s | %.2f | %.2f | %.0f | %.0f |\n", row.Mode, row.Concurrency,
			row.Quota.CPUMSPerCall, row.Without.CPUMSPerCall, cpu, row.Quota.MallocsPerCall, row.Without.MallocsPerCall,
			cell2(row.MallocsRatio), row.Quota.P50MS, row.Without.P50MS, row.Quota.RPS, row.Without.RPS)
	}
	w("\n")
}
