package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/registry/pulsarsrc"
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
}

// syncWait bounds how long start-up waits for the broker sources to read
// what exists (announcements already made, the config service's values).
const syncWait = 5 * time.Second

// newRegistrySources loads the file (a file with problems is an error) and
// prepares the other sources; startRegistrySources runs them.
func newRegistrySources(g *Gateway) (*registrySources, error) {
	cfg, log := g.cfg, g.log
	rs := &registrySources{merger: registry.NewMerger(log, g.onRegistrySwap)}
	if cfg.Registry != "" {
		rs.merger.Enable(registry.OriginFile)
		f, err := registry.NewFileSource(cfg.Registry, log, rs.merger)
		if err != nil {
			return nil, err
		}
		rs.file = f
	}
	if !cfg.Announcements && !cfg.TrustGraphConfig {
		return rs, nil
	}
	copts := pulsar.ClientOptions{URL: cfg.PulsarURL, TLSTrustCertsFilePath: cfg.PulsarTLSCA,
		ConnectionTimeout: 5 * time.Second, OperationTimeout: 10 * time.Second,
		Logger: plog.NewLoggerWithSlog(slog.New(warnOnly{log.Handler()}).With("component", "pulsar-client", "for", "registry"))}
	if cfg.PulsarTokenFile != "" {
		copts.Authentication = pulsar.NewAuthenticationTokenFromFile(cfg.PulsarTokenFile)
	}
	c, err := pulsar.NewClient(copts)
	if err != nil {
		return nil, fmt.Errorf("registry sources: pulsar client: %w", err)
	}
	rs.client = c
	if cfg.TrustGraphConfig {
		rs.merger.Enable(registry.OriginConfigService)
		rs.others = append(rs.others, pulsarsrc.NewConfigService(c, pulsarsrc.ConfigOptions{Workspace: cfg.TrustGraphWorkspace, Logger: log}))
	}
	if cfg.Announcements {
		rs.merger.Enable(registry.OriginAnnouncement)
		rs.others = append(rs.others, pulsarsrc.NewAnnouncements(c, cfg.AnnounceTopic, log))
	}
	return rs, nil
}

// start runs the broker sources and waits (up to syncWait) until they have
// read what exists, then logs which sources serve.
func (rs *registrySources) start(log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	rs.cancel = cancel
	for _, s := range rs.others {
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
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

// stop ends the broker sources and closes their client.
func (rs *registrySources) stop() {
	if rs.cancel != nil {
		rs.cancel()
	}
	rs.wg.Wait()
	if rs.client != nil {
		rs.client.Close()
	}
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

// collector exports the sources' state to /metrics.
func (rs *registrySources) collector() prometheus.Collector { return registryCollector{rs} }

type registryCollector struct{ rs *registrySources }

var (
	descConflicts = prometheus.NewDesc("toolgate_registry_conflicts",
		"Tool names and service ids defined by more than one registry source (the higher-precedence one is served).", nil, nil)
	descRejected = prometheus.NewDesc("toolgate_registry_rejected_total",
		"Registry updates refused as invalid, by source (for the config service: invalid descriptors); what was there stayed.", []string{"source"}, nil)
	descSourceUp = prometheus.NewDesc("toolgate_registry_source_up",
		"1 when a registry source reaches what it reads, by source.", []string{"source"}, nil)
	descUnits = prometheus.NewDesc("toolgate_registry_source_units",
		"Units merged from each registry source (announcing services, for announcements).", []string{"source"}, nil)
)

func (c registryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConflicts
	ch <- descRejected
	ch <- descSourceUp
	ch <- descUnits
}

func (c registryCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descConflicts, prometheus.GaugeValue, float64(len(c.rs.merger.Conflicts())))
	for _, st := range c.rs.merger.Status() {
		up := 0.0
		if st.Error == "" && st.Synced {
			up = 1
		}
		rejected := st.Rejected
		if st.Origin == registry.OriginFile {
			rejected += c.rs.reloadFailures()
		}
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(rejected), string(st.Origin))
		ch <- prometheus.MustNewConstMetric(descSourceUp, prometheus.GaugeValue, up, string(st.Origin))
		ch <- prometheus.MustNewConstMetric(descUnits, prometheus.GaugeValue, float64(st.Units), string(st.Origin))
	}
}

// warnOnly passes on warnings and errors only: the Pulsar client logs every
// reader and subscription at info level.
type warnOnly struct{ slog.Handler }

func (w warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}
func (w warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{w.Handler.WithAttrs(as)} }
func (w warnOnly) WithGroup(name string) slog.Handler    { return warnOnly{w.Handler.WithGroup(name)} }
