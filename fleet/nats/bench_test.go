package nats_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"slices"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
	"cxlpool/sim"
)

// BenchmarkGrantEvent measures the fleet plane's latency from a grant on
// one box (the Manager's change) to a subscriber on another node of a
// three-node cluster (replicas 3: the stream acknowledges once a quorum
// stored it), beside a bare core-NATS publish→subscribe between the same
// two nodes in the same run: grant-p50-ms, grant-p99-ms, bare-p50-ms,
// bare-p99-ms and the p50 ratio.
func BenchmarkGrantEvent(b *testing.B) {
	c := startCluster(b)
	creds := credsFile(b, testUser, testPassword)
	sub := connect(b, fleetnats.Config{URLs: c.urls(2), CredsFile: creds, Replicas: 3, Name: "other-box"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scfg := sim.DefaultConfig()
	scfg.Capacity, scfg.BlockSize = 16<<30, testBlock
	app, err := appliance.Open(ctx, appliance.Config{DataDir: b.TempDir(), Sim: scfg, Logger: slog.New(slog.DiscardHandler),
		Fleet: appliance.FleetConfig{Enabled: true, URLs: c.urls(0), CredsFile: creds, Replicas: 3}})
	if err != nil {
		b.Fatal(err)
	}
	defer app.Close()
	if err := app.Start(ctx); err != nil {
		b.Fatal(err)
	}
	box := app.Fleet.Service.Box()

	got := make(chan time.Duration, 16)
	stop, err := sub.Subscribe(ctx, 0, fleet.SubjectRoot+"."+string(box)+".host.*.capacity", func(e fleetnats.Event) {
		if e.State == string(dcd.GrantGranted) {
			got <- time.Since(e.Time)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer stop()

	// The bare round: core NATS from node 0 to node 2.
	pubc := connectRaw(b, c.nodes[0].URL)
	subc := connectRaw(b, c.nodes[2].URL)
	bare := make(chan time.Duration, 16)
	s, err := subc.Subscribe("bench.bare", func(m *natsgo.Msg) {
		bare <- time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(m.Data))))
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Unsubscribe()
	subc.Flush()

	var grants, bares []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ch, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: testBlock, Region: 0})
		if err != nil {
			b.Fatal(err)
		}
		g, err := app.Manager.Grant(ctx, ch.ID, dcd.HostID(i%4))
		if err != nil {
			b.Fatal(err)
		}
		select {
		case d := <-got:
			grants = append(grants, d)
		case <-time.After(30 * time.Second):
			b.Fatal("grant event not received")
		}
		if _, err := app.Manager.Release(ctx, g.ID); err != nil {
			b.Fatal(err)
		}
		if err := app.Manager.DeleteChunk(ctx, ch.ID); err != nil {
			b.Fatal(err)
		}
		var ts [8]byte
		binary.BigEndian.PutUint64(ts[:], uint64(time.Now().UnixNano()))
		if err := pubc.Publish("bench.bare", ts[:]); err != nil {
			b.Fatal(err)
		}
		select {
		case d := <-bare:
			bares = append(bares, d)
		case <-time.After(30 * time.Second):
			b.Fatal("bare message not received")
		}
	}
	b.StopTimer()
	gp50, gp99 := pct(grants, 50), pct(grants, 99)
	bp50, bp99 := pct(bares, 50), pct(bares, 99)
	b.ReportMetric(ms(gp50), "grant-p50-ms")
	b.ReportMetric(ms(gp99), "grant-p99-ms")
	b.ReportMetric(ms(bp50), "bare-p50-ms")
	b.ReportMetric(ms(bp99), "bare-p99-ms")
	if bp50 > 0 {
		b.ReportMetric(float64(gp50)/float64(bp50), "p50-ratio")
	}
}

func connectRaw(b *testing.B, url string) *natsgo.Conn {
	nc, err := natsgo.Connect(url, natsgo.UserInfo(testUser, testPassword))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
