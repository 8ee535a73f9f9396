package nats_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
	"cxlpool/sim"
)

// routeProxy fronts one node's route port: every route connection to
// that node, configured or gossiped (each node advertises its proxy),
// passes through it. The proxy learns which node dialled from the
// route's CONNECT (its "name" is the dialling server's id), so the test
// can cut exactly the links that cross a partition and restore them.
type routeProxy struct {
	ln     net.Listener
	target string
	dst    int
	p      *partition

	mu    sync.Mutex
	conns []*proxied
}

type proxied struct {
	src       string // the dialling server's id
	a, b      net.Conn
	closeOnce sync.Once
}

func (c *proxied) close() { c.closeOnce.Do(func() { c.a.Close(); c.b.Close() }) }

// partition is the test's switch: which nodes are on which side.
type partition struct {
	mu    sync.Mutex
	ids   map[string]int // server id → node index
	side  map[int]int    // node index → side; nil: no partition
	prox  []*routeProxy
	drops int // connections refused or cut
}

func (p *partition) crosses(srcID string, dst int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.side == nil {
		return false
	}
	src, ok := p.ids[srcID]
	return ok && p.side[src] != p.side[dst]
}

// cut separates the nodes into sides (node index → side) and closes every
// route connection between sides.
func (p *partition) cut(side map[int]int) {
	p.mu.Lock()
	p.side = side
	p.mu.Unlock()
	for _, rp := range p.prox {
		rp.mu.Lock()
		keep := rp.conns[:0]
		for _, c := range rp.conns {
			if p.crosses(c.src, rp.dst) {
				c.close()
				p.mu.Lock()
				p.drops++
				p.mu.Unlock()
				continue
			}
			keep = append(keep, c)
		}
		rp.conns = keep
		rp.mu.Unlock()
	}
}

// heal lets every route through again.
func (p *partition) heal() {
	p.mu.Lock()
	p.side = nil
	p.mu.Unlock()
}

func (rp *routeProxy) serve() {
	for {
		a, err := rp.ln.Accept()
		if err != nil {
			return
		}
		go rp.handle(a)
	}
}

func (rp *routeProxy) handle(a net.Conn) {
	b, err := net.Dial("tcp", rp.target)
	if err != nil {
		a.Close()
		return
	}
	c := &proxied{a: a, b: b}
	// The node speaks first (INFO); the dialler answers CONNECT.
	go func() { io.Copy(a, b); c.close() }()
	br := bufio.NewReader(a)
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := br.ReadString('\n')
	a.SetReadDeadline(time.Time{})
	if err != nil {
		c.close()
		return
	}
	var connect struct {
		Name string `json:"name"`
	}
	if js, ok := strings.CutPrefix(line, "CONNECT "); ok {
		json.Unmarshal([]byte(js), &connect)
	}
	c.src = connect.Name
	if rp.p.crosses(c.src, rp.dst) {
		rp.p.mu.Lock()
		rp.p.drops++
		rp.p.mu.Unlock()
		c.close()
		return
	}
	rp.mu.Lock()
	rp.conns = append(rp.conns, c)
	rp.mu.Unlock()
	if _, err := io.WriteString(b, line); err != nil {
		c.close()
		return
	}
	io.Copy(b, br)
	c.close()
}

// startProxiedCluster is three nats-server nodes whose routes all go
// through the partition's proxies.
func startProxiedCluster(t *testing.T) (*cluster, *partition) {
	t.Helper()
	bin := natsServer(t)
	dir := t.TempDir()
	const n = 3
	p := &partition{ids: map[string]int{}}
	ports, cports := make([]int, n), make([]int, n)
	for i := range n {
		ports[i], cports[i] = freePort(t), freePort(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rp := &routeProxy{ln: ln, target: fmt.Sprintf("127.0.0.1:%d", cports[i]), dst: i, p: p}
		p.prox = append(p.prox, rp)
		go rp.serve()
		t.Cleanup(func() { ln.Close() })
	}
	c := &cluster{}
	for i := range n {
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, "nats-route://"+p.prox[j].ln.Addr().String())
			}
		}
		nd := &node{name: fmt.Sprintf("n%d", i+1), URL: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]), t: t, bin: bin}
		nd.conf = filepath.Join(dir, nd.name+".conf")
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 1GB }
cluster { name: fleettest, listen: 127.0.0.1:%d, advertise: %q, routes: [%s] }
authorization { users: [ { user: %s, password: %s } ] }
`, nd.name, ports[i], filepath.Join(dir, nd.name), cports[i], p.prox[i].ln.Addr().String(), strings.Join(routes, ", "), testUser, testPassword)
		if err := os.WriteFile(nd.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		nd.start()
		c.nodes = append(c.nodes, nd)
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			nd.kill()
		}
	})
	// Each node's server id, from the INFO its client port sends first.
	for i := range n {
		deadline := time.Now().Add(30 * time.Second)
		for {
			id, err := serverID(fmt.Sprintf("127.0.0.1:%d", ports[i]))
			if err == nil {
				p.mu.Lock()
				p.ids[id] = i
				p.mu.Unlock()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: no INFO within 30s: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond) // poll interval
		}
	}
	return c, p
}

func serverID(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	var info struct {
		ID string `json:"server_id"`
	}
	js, _ := strings.CutPrefix(line, "INFO ")
	if err := json.Unmarshal([]byte(js), &info); err != nil || info.ID == "" {
		return "", fmt.Errorf("INFO %q: %v", line, err)
	}
	return info.ID, nil
}

// TestPartitionHeals: three boxes, each on its own node of a three-node
// cluster, keep granting and publishing while the third node is cut off
// from the other two, then the links come back. After the heal every
// node's bucket has each box exactly once (with its last grant), and the
// stream holds every event each box published exactly once: no
// duplicate (the envelope id de-duplicates a retry whose ack was lost)
// and none lost (every box's envelope numbers, 1..last, are there).
func TestPartitionHeals(t *testing.T) {
	c, part := startProxiedCluster(t)
	creds := credsFile(t, testUser, testPassword)
	const ttl = 6 * time.Second
	obs := make([]*fleetnats.Plane, 3)
	for i := range c.nodes {
		obs[i] = connect(t, fleetnats.Config{URLs: c.urls(i), CredsFile: creds, Replicas: 3, TTL: ttl, Name: fmt.Sprintf("observer%d", i)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	apps := make([]*appliance.Appliance, 3)
	for i := range apps {
		scfg := sim.DefaultConfig()
		scfg.Capacity, scfg.BlockSize, scfg.Heads, scfg.Serial = 4<<30, testBlock, 4, uint64(0xbeef00+i+1)
		scfg.WorkloadTick = -1
		app, err := appliance.Open(ctx, appliance.Config{DataDir: t.TempDir(), Sim: scfg, Logger: slog.New(slog.DiscardHandler),
			Fleet: appliance.FleetConfig{Enabled: true, URLs: c.urls(i), CredsFile: creds, TTL: ttl, Replicas: 3, RetryMax: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { app.Close() })
		if err := app.Start(ctx); err != nil {
			t.Fatal(err)
		}
		apps[i] = app
	}
	for i, app := range apps {
		select {
		case <-app.Fleet.Joined():
		case <-time.After(60 * time.Second):
			t.Fatalf("box %d not joined: %+v", i, app.Fleet.State())
		}
	}
	// grant gives host h of box i one block (a capacity record or more).
	grant := func(i, h int) {
		t.Helper()
		ch, err := apps[i].Manager.Reserve(ctx, dcd.ReserveRequest{Size: testBlock, Region: 0})
		if err != nil {
			t.Fatalf("box %d: reserve: %v", i, err)
		}
		if _, err := apps[i].Manager.Grant(ctx, ch.ID, dcd.HostID(h)); err != nil {
			t.Fatalf("box %d: grant: %v", i, err)
		}
	}
	// publish: every box a Redfish event, as its API would.
	seq := 0
	publish := func() {
		seq++
		for i, app := range apps {
			h := uint16(i)
			app.Fleet.Service.PublishRedfish(fleet.RedfishEvent{MessageID: "ResourceEvent.ResourceChanged", Args: []string{strconv.Itoa(seq)}, Host: &h})
		}
	}
	for i := range apps {
		grant(i, 1)
		publish()
	}

	// Cut node 3 off; the boxes go on.
	part.cut(map[int]int{0: 0, 1: 0, 2: 1})
	cutAt := time.Now()
	for i := range apps {
		grant(i, 2)
	}
	for range 20 {
		publish()
		time.Sleep(100 * time.Millisecond) // the boxes' pace while partitioned, not a wait for an event
	}
	for i := range apps {
		grant(i, 3)
	}
	// The cut box's node has no quorum: its events wait in its queue.
	if q, _ := apps[2].Fleet.Service.Backlog(); q == 0 {
		t.Errorf("box 3's queue is empty while its node is cut off: the partition did not take")
	}
	part.mu.Lock()
	drops := part.drops
	part.mu.Unlock()
	t.Logf("partitioned for %v; route connections cut or refused: %d", time.Since(cutAt).Round(time.Millisecond), drops)
	part.heal()
	healAt := time.Now()
	for range 5 {
		publish()
	}

	// Every box's queue drains: the stream acknowledged all.
	deadline := time.Now().Add(90 * time.Second)
	for {
		pending := 0
		for _, app := range apps {
			q, dropped := app.Fleet.Service.Backlog()
			if dropped != 0 {
				t.Fatalf("box %s dropped %d events", app.Fleet.Service.Box(), dropped)
			}
			pending += q
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events still queued 90s after the heal", pending)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
	t.Logf("every box's queue drained %v after the heal", time.Since(healAt).Round(time.Millisecond))

	// Each node: every box once, with its three grants.
	for i, p := range obs {
		waitBoxes(t, p, fmt.Sprintf("node %d sees each box with its grants", i), 60*time.Second, func(m map[fleet.BoxID]fleet.Inventory) bool {
			if len(m) != 3 {
				return false
			}
			for _, app := range apps {
				inv, ok := m[app.Fleet.Service.Box()]
				if !ok || len(inv.Heads) < 4 || inv.Heads[1].Granted != testBlock || inv.Heads[2].Granted != testBlock || inv.Heads[3].Granted != testBlock {
					return false
				}
			}
			return true
		})
	}
	// Each node's copy of the stream: every envelope once, none missing.
	for i, p := range obs {
		ids := map[string]int{}
		var last uint64
		rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
		err := p.Replay(rctx, fleetnats.Replay{Filter: fleet.SubjectRoot + ".>"}, func(e fleetnats.Event) error {
			ids[e.ID]++
			last = e.Seq
			return nil
		})
		rcancel()
		if err != nil {
			t.Fatalf("node %d: replay: %v", i, err)
		}
		perBox := map[fleet.BoxID][]int{}
		for id, n := range ids {
			if n != 1 {
				t.Errorf("node %d: event %s stored %d times", i, id, n)
			}
			k := strings.LastIndexByte(id, '-')
			num, _ := strconv.Atoi(id[k+1:])
			box := fleet.BoxID(id[:strings.LastIndexByte(id[:k], '-')])
			perBox[box] = append(perBox[box], num)
		}
		for _, app := range apps {
			nums := perBox[app.Fleet.Service.Box()]
			seen := map[int]bool{}
			top := 0
			for _, n := range nums {
				seen[n] = true
				top = max(top, n)
			}
			for n := 1; n <= top; n++ {
				if !seen[n] {
					t.Errorf("node %d: box %s's event %d is missing (of %d)", i, app.Fleet.Service.Box(), n, top)
				}
			}
			// 26 Redfish events and at least one capacity record per grant.
			if top < 26+3 {
				t.Errorf("node %d: box %s has %d events on the stream, want at least %d", i, app.Fleet.Service.Box(), top, 26+3)
			}
		}
		t.Logf("node %d: %d events, last sequence %d", i, len(ids), last)
	}
}
