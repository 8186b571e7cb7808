package embedded

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EtcdConfig configures an embedded single-member etcd server.
type EtcdConfig struct {
	Dir        string // data directory; reused across restarts
	ClientAddr string // host:port for clients; "" picks a free loopback port
	PeerAddr   string // host:port for the (unused) peer listener; "" picks one
	// Fast selects test timings: 10ms ticks, 100ms elections and no fsync.
	// Data survives a clean stop but not a machine crash.
	Fast bool
	// StartTimeout bounds the wait for the server to become ready; 0 = 30s.
	StartTimeout time.Duration
	// Logger receives etcd's logs; nil discards them.
	Logger *zap.Logger
	// CompactionRetention, when non-empty, enables periodic auto-compaction
	// (e.g. "1h"); tests leave it empty and compact by hand.
	CompactionRetention string
}

// Etcd is a running embedded etcd server.
type Etcd struct {
	mu       sync.Mutex
	e        *embed.Etcd
	cfg      *embed.Config
	timeout  time.Duration
	endpoint string
	closed   bool
}

// StartEtcd starts an etcd server and waits until it serves clients.
func StartEtcd(c EtcdConfig) (*Etcd, error) {
	if c.Dir == "" {
		return nil, errors.New("embedded: etcd: Dir is required")
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	// A port picked by FreeAddr may be taken before etcd binds it; retry
	// with fresh ports when the caller left the choice to us.
	pick := c.ClientAddr == "" || c.PeerAddr == ""
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		cc := c
		var err error
		if cc.ClientAddr == "" {
			if cc.ClientAddr, err = FreeAddr(); err != nil {
				return nil, err
			}
		}
		if cc.PeerAddr == "" {
			if cc.PeerAddr, err = FreeAddr(); err != nil {
				return nil, err
			}
		}
		e, err := startEtcd(cc)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if !pick || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

func startEtcd(c EtcdConfig) (*Etcd, error) {
	cfg, err := memberConfig(c, "tenure")
	if err != nil {
		return nil, err
	}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	return launch(cfg, c.StartTimeout)
}

// memberConfig builds one member's embed config, without InitialCluster.
func memberConfig(c EtcdConfig, name string) (*embed.Config, error) {
	cu, err := url.Parse("http://" + c.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("embedded: etcd client address %q: %w", c.ClientAddr, err)
	}
	pu, err := url.Parse("http://" + c.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("embedded: etcd peer address %q: %w", c.PeerAddr, err)
	}
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = c.Dir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	if c.Fast {
		cfg.TickMs = 10
		cfg.ElectionMs = 100
		cfg.UnsafeNoFsync = true
	}
	if c.CompactionRetention != "" {
		cfg.AutoCompactionMode = "periodic"
		cfg.AutoCompactionRetention = c.CompactionRetention
	}
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	return cfg, nil
}

// launch starts a member and waits until it serves clients.
func launch(cfg *embed.Config, timeout time.Duration) (*Etcd, error) {
	addr := cfg.ListenClientUrls[0].Host
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded: start etcd at %s: %w", addr, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded: etcd at %s failed while starting: %w", addr, err)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded: etcd at %s not ready after %s", addr, timeout)
	}
	return &Etcd{e: e, cfg: cfg, timeout: timeout, endpoint: "http://" + addr}, nil
}

// StartEtcdCluster starts an n-member cluster with fast timings, members'
// data in dir/member-<i>, on free loopback ports. It is for tests that need
// quorum loss: stopping a majority leaves the rest without a leader.
func StartEtcdCluster(dir string, n int, logger *zap.Logger) ([]*Etcd, error) {
	// Free ports are picked by listening and closing: another process can
	// take one before the member binds it. Such a start is retried with new
	// ports (and a fresh directory, since members may have written one).
	var err error
	for try := 0; try < 3; try++ {
		var ms []*Etcd
		ms, err = startEtcdCluster(fmt.Sprintf("%s/try-%d", dir, try), n, logger)
		if err == nil || !addrInUse(err) {
			return ms, err
		}
	}
	return nil, err
}

// addrInUse reports whether err is a bind failure on a taken port.
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

func startEtcdCluster(dir string, n int, logger *zap.Logger) ([]*Etcd, error) {
	if n < 1 {
		return nil, errors.New("embedded: etcd cluster needs at least one member")
	}
	cfgs := make([]*embed.Config, n)
	var initial []string
	for i := range cfgs {
		// Members are restarted on their addresses: keep them out of the
		// ephemeral range (see FreeStableAddr).
		ca, err := FreeStableAddr()
		if err != nil {
			return nil, err
		}
		pa, err := FreeStableAddr()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("m%d", i)
		cfgs[i], err = memberConfig(EtcdConfig{Dir: fmt.Sprintf("%s/member-%d", dir, i), ClientAddr: ca, PeerAddr: pa, Fast: true, Logger: logger}, name)
		if err != nil {
			return nil, err
		}
		initial = append(initial, name+"=http://"+pa)
	}
	members := make([]*Etcd, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "tenure-test"
		// Members wait for each other: start them together.
		wg.Add(1)
		go func() {
			defer wg.Done()
			members[i], errs[i] = launch(cfg, 30*time.Second)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, m := range members {
			if m != nil {
				m.Close()
			}
		}
		return nil, err
	}
	return members, nil
}

// Endpoint is the client URL, e.g. "http://127.0.0.1:2379".
func (e *Etcd) Endpoint() string { return e.endpoint }

// Close stops the server. Close clients first: the server waits for their
// streams to drain. Close is idempotent.
func (e *Etcd) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	e.e.Close()
}

// Restart starts a closed member again on its data directory and
// addresses, as after a crash and reboot. Members of a cluster restarted
// together rejoin it; a lone member must wait for the others.
func (e *Etcd) Restart() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		return fmt.Errorf("embedded: etcd at %s: restart of a running member", e.endpoint)
	}
	// The stopped member's sockets may still hold its ports for a moment:
	// a bind failure is retried, for a bounded time.
	deadline := time.Now().Add(restartBindWait)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		cfg := *e.cfg
		next, err := launchNoWait(&cfg)
		if err == nil {
			e.e, e.closed = next, false
			return nil
		}
		if !addrInUse(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
	}
}

// restartBindWait bounds how long Restart retries binding a member's
// ports.
const restartBindWait = 10 * time.Second

// launchNoWait starts a member without waiting for it to serve: a member
// of a cluster without quorum is not ready until the others come back.
func launchNoWait(cfg *embed.Config) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded: restart etcd at %s: %w", cfg.ListenClientUrls[0].Host, err)
	}
	return e, nil
}
