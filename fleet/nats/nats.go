// Package nats is the fleet plane on NATS JetStream: box records in the
// key-value bucket Bucket (key: box id; the bucket's TTL expires a box that
// stopped writing), events on the stream Stream (subjects
// fleet.SubjectRoot.<box>.…, stored on disk, replayable from any
// sequence, de-duplicated by the envelope id), and KV-store block events
// on KVStream. It also runs the embedded server a box uses when it joins
// no external cluster (embedded.go).
package nats

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cxlpool/fleet"
)

// Names of the JetStream assets the fleet shares.
const (
	Bucket   = "cxlpool_boxes"
	Stream   = "CXLPOOL_EVENTS"
	KVStream = "CXLPOOL_KV_EVENTS"
)

// Config says how to reach the plane.
type Config struct {
	// URLs are the servers (nats:// or tls://); the client fails over
	// among them and reconnects for as long as it lives.
	URLs []string
	// CredsFile holds the credentials: a NATS .creds file (user JWT and
	// nkey seed), an nkey seed (SU…), or one line USER:PASSWORD. It must
	// not be readable by group or others. Required: the plane takes no
	// anonymous client.
	CredsFile string
	// User and Password are given directly instead (the embedded server).
	User, Password string
	// CAFile is the CA bundle that verifies the servers' TLS certificates
	// (tls:// URLs); empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's certificate and key, for
	// servers that verify clients (tls { verify: true }).
	CertFile, KeyFile string
	// Name is the connection's name on the servers (the box id).
	Name string
	// TTL is how long a box's record lives after its last write; 0: 30 s.
	TTL time.Duration
	// Replicas of the bucket and streams (1 alone, 3 on a cluster); 0: 1.
	Replicas int
	// MaxAge bounds how long the event stream keeps events; 0: 7 days.
	MaxAge time.Duration
	Logger *slog.Logger
}

// Plane is a connection to the fleet.
type Plane struct {
	nc  *natsgo.Conn
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	ttl time.Duration
	log *slog.Logger
}

// ErrAnonymous is a plane configuration without credentials.
var ErrAnonymous = errors.New("the fleet plane takes no anonymous client: give a credentials file")

// Connect dials the servers, authenticates and makes sure the bucket and
// the streams exist with this configuration (a box's TTL, replicas and
// retention: the boxes of a fleet are configured alike).
func Connect(ctx context.Context, cfg Config) (*Plane, error) {
	nc, cfg, err := dial(cfg)
	if err != nil {
		return nil, err
	}
	p, err := setup(ctx, nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return p, nil
}

// ConnectReader dials like Connect but only binds to the bucket the boxes
// created, changing no configuration (poolctl fleet).
func ConnectReader(ctx context.Context, cfg Config) (*Plane, error) {
	nc, cfg, err := dial(cfg)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("fleet/nats: %w", err)
	}
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("fleet/nats: bucket %s (has any box joined this fleet?): %w", Bucket, err)
	}
	return &Plane{nc: nc, js: js, kv: kv, ttl: cfg.TTL, log: cfg.Logger}, nil
}

func dial(cfg Config) (*natsgo.Conn, Config, error) {
	if len(cfg.URLs) == 0 {
		return nil, cfg, errors.New("fleet/nats: no server URL")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 7 * 24 * time.Hour
	}
	log := cfg.Logger
	opts := []natsgo.Option{
		natsgo.Name(cfg.Name),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(250 * time.Millisecond),
		natsgo.Timeout(5 * time.Second),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				log.Warn("fleet: disconnected from NATS", "err", err)
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) { log.Info("fleet: reconnected to NATS", "server", nc.ConnectedUrlRedacted()) }),
		// The library's default writes asynchronous errors to stderr.
		natsgo.ErrorHandler(func(_ *natsgo.Conn, sub *natsgo.Subscription, err error) {
			log.Warn("fleet: NATS error", "err", err)
		}),
	}
	if cfg.User != "" {
		// The box's own embedded server: its password is for it alone,
		// so the client keeps to it and never dials the other boxes'
		// servers the cluster gossips.
		opts = append(opts, natsgo.IgnoreDiscoveredServers())
	}
	auth, err := credentials(cfg)
	if err != nil {
		return nil, cfg, err
	}
	opts = append(opts, auth...)
	if cfg.CAFile != "" {
		opts = append(opts, natsgo.RootCAs(cfg.CAFile))
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, cfg, errors.New("fleet/nats: a client certificate needs both its certificate and its key file")
	}
	if cfg.CertFile != "" {
		opts = append(opts, natsgo.ClientCert(cfg.CertFile, cfg.KeyFile))
	}
	nc, err := natsgo.Connect(strings.Join(cfg.URLs, ","), opts...)
	if err != nil {
		return nil, cfg, fmt.Errorf("fleet/nats: connect to %s: %w%s", strings.Join(cfg.URLs, ","), err, tlsHint(err))
	}
	return nc, cfg, nil
}

// tlsHint says which setting a TLS failure points at.
func tlsHint(err error) string {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var cv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &ua) || (errors.As(err, &cv) && strings.Contains(err.Error(), "unknown authority")):
		return " (the servers' certificate is not signed by the CA given: check --fleet-ca)"
	case errors.As(err, &hn):
		return " (the servers' certificate does not name the address dialled)"
	case strings.Contains(err.Error(), "certificate required") || strings.Contains(err.Error(), "bad certificate") ||
		strings.Contains(err.Error(), "closed by remote after TLS handshake"):
		// The server's refusal of a client certificate it could not
		// verify reaches the client as a closed connection.
		return " (the servers verify clients: give --fleet-cert and --fleet-key signed by their CA)"
	case strings.Contains(err.Error(), "secure connection") || strings.Contains(err.Error(), "TLS Required"):
		return " (the servers require TLS: use tls:// URLs and --fleet-ca)"
	}
	return ""
}

func setup(ctx context.Context, nc *natsgo.Conn, cfg Config) (*Plane, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("fleet/nats: %w", err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "cxlpool box inventory records (fleet.Inventory), expiring a TTL after a box's last write",
		History: 1, TTL: cfg.TTL, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("fleet/nats: bucket %s: %w", Bucket, err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: Stream, Description: "cxlpool box events (fleet.Envelope)", Subjects: []string{fleet.SubjectRoot + ".>"},
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas, MaxAge: cfg.MaxAge, Duplicates: 2 * time.Minute,
		MaxBytes: 256 << 20,
	}); err != nil {
		return nil, fmt.Errorf("fleet/nats: stream %s: %w", Stream, err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: KVStream, Description: "KV-store block events (Dynamo RouterEvent JSON)", Subjects: []string{fleet.KVSubjectRoot + ".>"},
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas, MaxAge: time.Hour, Duplicates: time.Minute,
		MaxBytes: 64 << 20,
	}); err != nil {
		return nil, fmt.Errorf("fleet/nats: stream %s: %w", KVStream, err)
	}
	return &Plane{nc: nc, js: js, kv: kv, ttl: cfg.TTL, log: cfg.Logger}, nil
}

// credentials turns the configuration into the client's auth options.
func credentials(cfg Config) ([]natsgo.Option, error) {
	if cfg.User != "" {
		return []natsgo.Option{natsgo.UserInfo(cfg.User, cfg.Password)}, nil
	}
	if cfg.CredsFile == "" {
		return nil, fmt.Errorf("fleet/nats: %w", ErrAnonymous)
	}
	st, err := os.Stat(cfg.CredsFile)
	if err != nil {
		return nil, fmt.Errorf("fleet/nats: credentials: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("fleet/nats: credentials %s are readable by others (mode %#o): chmod 600 it", cfg.CredsFile, st.Mode().Perm())
	}
	b, err := os.ReadFile(cfg.CredsFile)
	if err != nil {
		return nil, fmt.Errorf("fleet/nats: credentials: %w", err)
	}
	s := strings.TrimSpace(string(b))
	switch {
	case strings.Contains(s, "BEGIN NATS USER JWT"):
		return []natsgo.Option{natsgo.UserCredentials(cfg.CredsFile)}, nil
	case strings.HasPrefix(s, "SU"):
		o, err := natsgo.NkeyOptionFromSeed(cfg.CredsFile)
		if err != nil {
			return nil, fmt.Errorf("fleet/nats: nkey seed: %w", err)
		}
		return []natsgo.Option{o}, nil
	}
	user, pass, ok := strings.Cut(strings.SplitN(s, "\n", 2)[0], ":")
	if !ok || user == "" || pass == "" {
		return nil, fmt.Errorf("fleet/nats: credentials %s: want a .creds file, an nkey seed or USER:PASSWORD", cfg.CredsFile)
	}
	return []natsgo.Option{natsgo.UserInfo(user, pass)}, nil
}

// Close drains the connection.
func (p *Plane) Close() error {
	if err := p.nc.Drain(); err != nil {
		p.nc.Close()
	}
	return nil
}

// Conn is the underlying connection (benchmarks compare against it).
func (p *Plane) Conn() *natsgo.Conn { return p.nc }

// PutInventory writes inv under its box id.
func (p *Plane) PutInventory(ctx context.Context, inv fleet.Inventory) error {
	if !inv.Box.Valid() {
		return fmt.Errorf("fleet/nats: box id %q: %w", inv.Box, fleet.ErrBadName)
	}
	b, err := json.Marshal(inv)
	if err != nil {
		return fmt.Errorf("fleet/nats: %w", err)
	}
	if _, err := p.kv.Put(ctx, string(inv.Box), b); err != nil {
		return fmt.Errorf("fleet/nats: put %s: %w", inv.Box, err)
	}
	return nil
}

// Boxes lists the live boxes' records, by box id.
func (p *Plane) Boxes(ctx context.Context) ([]fleet.Inventory, error) {
	w, err := p.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("fleet/nats: list boxes: %w", err)
	}
	defer w.Stop()
	var out []fleet.Inventory
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("fleet/nats: list boxes: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("fleet/nats: list boxes: watcher closed")
			}
			if e == nil { // the initial values are all delivered
				slices.SortFunc(out, func(a, b fleet.Inventory) int { return strings.Compare(string(a.Box), string(b.Box)) })
				return out, nil
			}
			var inv fleet.Inventory
			if err := json.Unmarshal(e.Value(), &inv); err != nil {
				p.log.Warn("fleet: a box record does not decode", "key", e.Key(), "err", err)
				continue
			}
			out = append(out, inv)
		}
	}
}

// Publish stores e on the event stream; the envelope id de-duplicates a
// retry.
func (p *Plane) Publish(ctx context.Context, e fleet.Envelope) (uint64, error) {
	if !e.Box.Valid() {
		return 0, fmt.Errorf("fleet/nats: box id %q: %w", e.Box, fleet.ErrBadName)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return 0, fmt.Errorf("fleet/nats: %w", err)
	}
	ack, err := p.js.Publish(ctx, fleet.EventSubject(e), b, jetstream.WithMsgID(e.ID), jetstream.WithExpectStream(Stream))
	if err != nil {
		return 0, fmt.Errorf("fleet/nats: publish %s: %w", e.ID, err)
	}
	return ack.Sequence, nil
}

// Event is an envelope with its stream sequence.
type Event struct {
	Seq uint64 `json:"seq"`
	fleet.Envelope
}

// Subscribe delivers the stream's events matching filter (a subject with
// wildcards; empty: all) from sequence from (0: only new ones) to fn, in
// order, once each, until stop is called or ctx ends.
//
// The consumer is ephemeral (R1, in memory, no acks) and supervised here
// rather than by the client library's ordered consumer: when the server
// holding it dies, the library's recovery sometimes never resumed (a
// three-node test lost the subscriber for good in about one run in
// three). Here any sign of trouble — a missed heartbeat (1 s apart), a
// gap in the consumer's sequence, an error from the server — drops the
// consumer and creates a new one from the sequence after the last one
// delivered, retrying with a bounded backoff, so nothing is skipped or
// repeated.
func (p *Plane) Subscribe(ctx context.Context, from uint64, filter string, fn func(Event)) (stop func(), err error) {
	next := from
	if next == 0 {
		// Only new events: those after the stream's last one now.
		info, err := p.streamInfo(ctx)
		if err != nil {
			return nil, err
		}
		next = info.State.LastSeq + 1
	}
	s := &subscription{p: p, filter: filter, next: next, fn: fn}
	it, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(sctx, it)
	}()
	go func() {
		select {
		case <-ctx.Done():
			cancel()
		case <-sctx.Done():
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }, nil
}

func (p *Plane) streamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	st, err := p.js.Stream(ctx, Stream)
	if err != nil {
		return nil, fmt.Errorf("fleet/nats: stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet/nats: stream: %w", err)
	}
	return info, nil
}

// subscription is Subscribe's consumer and where it stands.
type subscription struct {
	p      *Plane
	filter string
	fn     func(Event)

	next     uint64 // stream sequence of the next event to deliver
	consumer string // the current consumer's name
	cseq     uint64 // its last delivered consumer sequence
}

// Bounds of Subscribe's recovery.
const (
	subHeartbeat  = time.Second
	subExpiry     = 10 * time.Second
	subCreateWait = 5 * time.Second
	subBackoffMax = 5 * time.Second
)

// open creates a consumer starting at s.next and its message iterator.
func (s *subscription) open(ctx context.Context) (jetstream.MessagesContext, error) {
	cc := jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       s.next,
		AckPolicy:         jetstream.AckNonePolicy,
		Replicas:          1,
		MemoryStorage:     true,
		InactiveThreshold: time.Minute,
	}
	if s.filter != "" {
		// FilterSubject, not FilterSubjects: servers before 2.10 (Debian's
		// among them) refuse the list form even with one subject.
		cc.FilterSubject = s.filter
	}
	cctx, cancel := context.WithTimeout(ctx, subCreateWait)
	defer cancel()
	c, err := s.p.js.CreateConsumer(cctx, Stream, cc)
	if err != nil {
		return nil, fmt.Errorf("fleet/nats: consumer: %w", err)
	}
	it, err := c.Messages(jetstream.PullHeartbeat(subHeartbeat), jetstream.PullExpiry(subExpiry),
		jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		s.drop(c.CachedInfo().Name)
		return nil, fmt.Errorf("fleet/nats: consume: %w", err)
	}
	s.consumer, s.cseq = c.CachedInfo().Name, 0
	return it, nil
}

// drop deletes a consumer in the background (best effort: an unreachable
// one expires after its inactive threshold).
func (s *subscription) drop(name string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), subCreateWait)
		defer cancel()
		_ = s.p.js.DeleteConsumer(ctx, Stream, name)
	}()
}

// run delivers from it until ctx ends, replacing the consumer whenever
// it fails.
func (s *subscription) run(ctx context.Context, it jetstream.MessagesContext) {
	stopIt := func(it jetstream.MessagesContext) {
		it.Stop()
		s.drop(s.consumer)
	}
	watch := func(it jetstream.MessagesContext) (unwatch func()) {
		stopped := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				it.Stop() // Next returns
			case <-stopped:
			}
		}()
		return func() { close(stopped) }
	}
	backoff := 100 * time.Millisecond
	for {
		unwatch := watch(it)
		err := s.deliver(it)
		unwatch()
		stopIt(it)
		if ctx.Err() != nil {
			return
		}
		s.p.log.Warn("fleet: event subscription lost its consumer; recreating it", "next", s.next, "err", err)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, subBackoffMax)
			var oerr error
			if it, oerr = s.open(ctx); oerr == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			s.p.log.Warn("fleet: event subscription: a consumer could not be created", "next", s.next, "err", oerr)
		}
		backoff = 100 * time.Millisecond
	}
}

// deliver hands the messages of it to fn until an error, which it returns.
func (s *subscription) deliver(it jetstream.MessagesContext) error {
	for {
		m, err := it.Next()
		if err != nil {
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if md.Sequence.Consumer != s.cseq+1 {
			return fmt.Errorf("consumer sequence went from %d to %d", s.cseq, md.Sequence.Consumer)
		}
		s.cseq = md.Sequence.Consumer
		if md.Sequence.Stream < s.next {
			continue // delivered already
		}
		s.next = md.Sequence.Stream + 1
		var e fleet.Envelope
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			s.p.log.Warn("fleet: an event does not decode", "seq", md.Sequence.Stream, "err", err)
			continue
		}
		s.fn(Event{Seq: md.Sequence.Stream, Envelope: e})
	}
}

// KVEvents publishes the KV store's block events of one box (the
// fleet.KVEventPublisher hook).
type KVEvents struct {
	p      *Plane
	box    fleet.BoxID
	worker int64

	mu   sync.Mutex
	next map[string]uint64
}

// NewKVEvents is the hook for the box whose device has serial.
func (p *Plane) NewKVEvents(serial uint64) *KVEvents {
	return &KVEvents{p: p, box: fleet.BoxIDFromSerial(serial), worker: fleet.WorkerID(serial), next: map[string]uint64{}}
}

var _ fleet.KVEventPublisher = (*KVEvents)(nil)

// BlockStored publishes a stored event.
func (k *KVEvents) BlockStored(ctx context.Context, ns string, parent *uint64, blocks []fleet.StoredBlock) error {
	return k.publish(ctx, ns, fleet.KVEventData{Stored: &fleet.KVStored{ParentHash: parent, Blocks: blocks}})
}

// BlockRemoved publishes a removed event.
func (k *KVEvents) BlockRemoved(ctx context.Context, ns string, hashes []uint64) error {
	return k.publish(ctx, ns, fleet.KVEventData{Removed: &fleet.KVRemoved{BlockHashes: hashes}})
}

// AllBlocksCleared publishes a cleared event.
func (k *KVEvents) AllBlocksCleared(ctx context.Context, ns string) error {
	return k.publish(ctx, ns, fleet.KVEventData{Cleared: true})
}

func (k *KVEvents) publish(ctx context.Context, ns string, d fleet.KVEventData) error {
	subj, err := fleet.KVEventSubject(ns, k.box)
	if err != nil {
		return err
	}
	// The id is taken and the event sent under the lock: the stream sees
	// a namespace's events in id order.
	k.mu.Lock()
	defer k.mu.Unlock()
	id := k.next[ns] + 1
	b, err := json.Marshal(fleet.RouterEvent{WorkerID: k.worker, StorageTier: "external", Event: fleet.KVCacheEvent{EventID: id, Data: d}})
	if err != nil {
		return fmt.Errorf("fleet/nats: %w", err)
	}
	if _, err := k.p.js.Publish(ctx, subj, b, jetstream.WithExpectStream(KVStream)); err != nil {
		return fmt.Errorf("fleet/nats: KV event: %w", err)
	}
	k.next[ns] = id
	return nil
}

// Replay says which of the stream's events to deliver.
type Replay struct {
	// From is the first stream sequence; Since the earliest time (when
	// From is 0); both zero: from the stream's start.
	From  uint64
	Since time.Time
	// Filter is a subject filter (fleet.EventFilter); empty: all.
	Filter string
	// Follow goes on delivering new events until ctx ends; without it
	// Replay returns once it delivered what the stream held when it began.
	Follow bool
}

// Replay delivers the events r selects to fn, in stream order, until
// the stream holds no more (or, following, until ctx ends); an error of
// fn ends it. The consumer is ordered and ephemeral, as Subscribe's.
func (p *Plane) Replay(ctx context.Context, r Replay, fn func(Event) error) error {
	cc := jetstream.OrderedConsumerConfig{}
	if r.Filter != "" {
		cc.FilterSubjects = []string{r.Filter}
	}
	switch {
	case r.From > 0:
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, r.From
	case !r.Since.IsZero():
		t := r.Since
		cc.DeliverPolicy, cc.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	default:
		cc.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	c, err := p.js.OrderedConsumer(ctx, Stream, cc)
	if err != nil {
		return fmt.Errorf("fleet/nats: consumer: %w", err)
	}
	if !r.Follow {
		info, err := c.Info(ctx)
		if err != nil {
			return fmt.Errorf("fleet/nats: consumer: %w", err)
		}
		if info.NumPending == 0 {
			return nil
		}
	}
	it, err := c.Messages()
	if err != nil {
		return fmt.Errorf("fleet/nats: consume: %w", err)
	}
	defer it.Stop()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			it.Stop() // Next returns
		case <-stopped:
		}
	}()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				if r.Follow {
					return nil // following ends with ctx
				}
				return fmt.Errorf("fleet/nats: replay: %w", ctx.Err())
			}
			return fmt.Errorf("fleet/nats: replay: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("fleet/nats: replay: %w", err)
		}
		var e fleet.Envelope
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			p.log.Warn("fleet: an event does not decode", "seq", md.Sequence.Stream, "err", err)
		} else if err := fn(Event{Seq: md.Sequence.Stream, Envelope: e}); err != nil {
			return err
		}
		if !r.Follow && md.NumPending == 0 {
			return nil
		}
	}
}

// PublishHotness publishes a namespace's hotness summary (fleet.KVHotness)
// on the KV stream; the box and worker fields are filled in.
func (k *KVEvents) PublishHotness(ctx context.Context, h fleet.KVHotness) error {
	subj, err := fleet.KVHotnessSubject(h.Namespace, k.box)
	if err != nil {
		return err
	}
	h.Box, h.WorkerID = k.box, k.worker
	if h.Top == nil {
		h.Top = []fleet.KVHotBlock{}
	}
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("fleet/nats: %w", err)
	}
	if _, err := k.p.js.Publish(ctx, subj, b, jetstream.WithExpectStream(KVStream)); err != nil {
		return fmt.Errorf("fleet/nats: KV hotness: %w", err)
	}
	return nil
}
