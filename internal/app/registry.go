package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/registry/pulsarsrc"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
)

// registrySources is the registry side of the gateway: the merger that
// publishes snapshots, the file source (nil without --registry), and the
// sources that read the broker.
type registrySources struct {
	merger *registry.Merger
	file   *registry.FileSource
	others []registry.Source
	client pulsar.Client // of the broker sources; nil when there are none
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// running holds the broker sources whose Run has not returned.
	mu      sync.Mutex
	running map[registry.Origin]bool
}

// syncWait bounds how long start-up waits for the broker sources to read
// what exists (announcements already made, the config service's values).
const syncWait = 5 * time.Second

// newRegistrySources loads the file (a file with problems is an error) and
// prepares the other sources, whose client connects as conn says, as the
// gateway's own does; start runs them.
func newRegistrySources(g *Gateway, conn transport.Connection) (*registrySources, error) {
	cfg, log := g.cfg, g.log
	rs := &registrySources{merger: registry.NewMerger(log, g.onRegistrySwap,
		registry.WithAnnouncedNamespaces(cfg.Registry.Announce.RequestNamespaces, cfg.Registry.Announce.ResponseNamespaces),
		registry.WithAnnounceTakeover(cfg.Registry.Announce.Takeover),
		registry.WithClaimGrace(cfg.Registry.Announce.ClaimGrace),
		registry.WithReleasedClaims(cfg.Registry.Announce.Release...),
		// Calls that heard nothing since an instance of their service
		// stopped may be published again (bridge.InstanceLeft).
		registry.WithInstanceLeft(func(requestTopic string) {
			if b := g.bridge; b != nil {
				b.InstanceLeft(requestTopic)
			}
		}),
		// The calls an instance whose lease ran out had taken end at once
		// (INSTANCE_LOST), not at their deadline (bridge.InstanceLost).
		registry.WithInstanceLost(func(requestTopic, instance string) {
			if b := g.bridge; b != nil {
				b.InstanceLost(requestTopic, instance)
			}
		}))}
	if cfg.Registry.File != "" {
		rs.merger.Enable(registry.OriginFile)
		f, err := registry.NewFileSource(cfg.Registry.File, log, rs.merger)
		if err != nil {
			return nil, err
		}
		rs.file = f
	}
	if !cfg.Registry.Announcements && !cfg.Registry.TrustGraph {
		return rs, nil
	}
	copts := pulsarbroker.ConnectionOptions(conn)
	copts.Logger = log.With("for", "registry")
	c, err := pulsarbroker.NewClient(copts)
	if err != nil {
		return nil, fmt.Errorf("registry sources: %w", err)
	}
	rs.client = c
	if cfg.Registry.TrustGraph {
		rs.merger.Enable(registry.OriginConfigService)
		rs.others = append(rs.others, pulsarsrc.NewConfigService(c, pulsarsrc.ConfigOptions{Workspace: cfg.Registry.TrustGraphWorkspace, Logger: log}))
	}
	if cfg.Registry.Announcements {
		rs.merger.Enable(registry.OriginAnnouncement)
		rs.others = append(rs.others, pulsarsrc.NewAnnouncements(c, cfg.Registry.AnnounceTopic, log))
	}
	return rs, nil
}

// start runs the broker sources and waits (up to syncWait) until they have
// read what exists, then logs which sources serve.
func (rs *registrySources) start(log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	rs.cancel = cancel
	rs.running = map[registry.Origin]bool{}
	for _, s := range rs.others {
		rs.running[s.Origin()] = true
		rs.wg.Add(1)
		go func() {
			defer func() {
				rs.mu.Lock()
				delete(rs.running, s.Origin())
				rs.mu.Unlock()
				rs.wg.Done()
			}()
			if err := s.Run(ctx, rs.merger); err != nil {
				log.Error("registry source stopped", "source", s.Origin(), "err", err)
			}
		}()
	}
	missing := rs.merger.WaitSynced(syncWait)
	var up []registry.Origin
	for _, st := range rs.merger.Status() {
		if st.Synced {
			up = append(up, st.Origin)
		}
	}
	snap := rs.merger.Registry().Snapshot()
	if len(missing) > 0 {
		log.Warn("registry sources not reachable yet; serving without them, they join when they are",
			"serving", up, "not_reachable", missing, "tools", len(snap.Tools()))
	} else {
		log.Info("registry sources", "serving", up, "tools", len(snap.Tools()), "tool_services", len(snap.Services()))
	}
}

// stopWithin ends the broker sources and closes their client, and
// returns when they have or when ctx ends, with what was still running
// then: the sources whose reads wait for a broker that does not answer
// ("<origin> source"), and "registry client".
func (rs *registrySources) stopWithin(ctx context.Context) []string {
	if rs.cancel != nil {
		rs.cancel()
	}
	var left []string
	if !within(ctx, rs.wg.Wait) {
		rs.mu.Lock()
		for o := range rs.running {
			left = append(left, string(o)+" source")
		}
		rs.mu.Unlock()
		slices.Sort(left)
	}
	rs.merger.Close()
	if rs.client != nil && !within(ctx, rs.client.Close) {
		left = append(left, "registry client")
	}
	return left
}

func (rs *registrySources) reloadFailures() int64 {
	if rs.file == nil {
		return 0
	}
	return rs.file.Failures()
}

func (rs *registrySources) lastError() string {
	if rs.file == nil {
		return ""
	}
	return rs.file.LastError()
}

// details are the registry's part of /readyz.
func (rs *registrySources) details(d map[string]any) {
	d["registry_reload_failures"] = rs.reloadFailures()
	d["registry_last_error"] = rs.lastError()
	d["registry_sources"] = rs.merger.Status()
	conflicts := rs.merger.Conflicts()
	d["registry_conflicts"] = len(conflicts)
	if len(conflicts) > 0 {
		d["registry_conflict_details"] = conflicts
	}
}

// stats are the registry's part of /metrics.
func (rs *registrySources) stats() telemetry.RegistryStats {
	snap := rs.merger.Registry().Snapshot()
	st := telemetry.RegistryStats{Version: snap.Version, Tools: len(snap.Tools()), ReloadFailures: rs.reloadFailures(),
		Conflicts: len(rs.merger.Conflicts())}
	for _, src := range rs.merger.Status() {
		rejected := src.Rejected
		if src.Origin == registry.OriginFile {
			rejected += rs.reloadFailures()
		}
		st.Sources = append(st.Sources, telemetry.RegistrySourceStats{Source: string(src.Origin),
			Up: src.Error == "" && src.Synced, Rejected: rejected, Units: src.Units})
	}
	return st
}
