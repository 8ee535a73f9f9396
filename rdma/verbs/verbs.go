//go:build verbs && cgo && linux

package verbs

/*
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Wrappers for what libibverbs declares as macros or static inline
// functions, and for the attribute structs, so Go never builds a union.

static int cxl_port(struct ibv_context *ctx, uint8_t port, uint16_t *lid, int *mtu, int *state, int *gids) {
	struct ibv_port_attr a;
	int rc = ibv_query_port(ctx, port, &a);
	if (rc == 0) {
		*lid = a.lid;
		*mtu = a.active_mtu;
		*state = a.state;
		*gids = a.gid_tbl_len;
	}
	return rc;
}

static int cxl_gid(struct ibv_context *ctx, uint8_t port, int index, uint8_t *out) {
	union ibv_gid g;
	int rc = ibv_query_gid(ctx, port, index, &g);
	if (rc == 0)
		memcpy(out, g.raw, 16);
	return rc;
}

static struct ibv_mr *cxl_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}

static struct ibv_qp *cxl_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 1;
	a.cap.max_send_wr = depth;
	a.cap.max_recv_wr = 1;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	return ibv_create_qp(pd, &a);
}

static int cxl_qp_init(struct ibv_qp *qp, uint8_t port, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int cxl_qp_rtr(struct ibv_qp *qp, uint8_t port, int gid_index, uint32_t dqpn, uint32_t rpsn,
		uint16_t dlid, uint8_t *dgid, int mtu) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.dlid = dlid;
	a.ah_attr.port_num = port;
	memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 64;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int cxl_qp_rts(struct ibv_qp *qp, uint32_t psn) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int cxl_qp_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static int cxl_post(struct ibv_qp *qp, int opcode, void *laddr, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, uint64_t compare_add, uint64_t swap) {
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;
	sge.addr = (uintptr_t)laddr;
	sge.length = len;
	sge.lkey = lkey;
	memset(&wr, 0, sizeof wr);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = opcode;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = compare_add;
		wr.wr.atomic.swap = swap;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

static int cxl_poll(struct ibv_cq *cq, int *status) {
	struct ibv_wc wc;
	int n = ibv_poll_cq(cq, 1, &wc);
	if (n > 0)
		*status = wc.status;
	return n;
}

static uint32_t cxl_qpn(struct ibv_qp *qp) { return qp->qp_num; }
static uint32_t cxl_rkey(struct ibv_mr *mr) { return mr->rkey; }
static uint32_t cxl_lkey(struct ibv_mr *mr) { return mr->lkey; }
// cxl_device_list is ibv_get_device_list through the header: linked
// statically (link_static.go) the header makes it a macro that first
// registers the providers named by RDMA_STATIC_PROVIDERS, which cgo
// calling the function directly would skip.
static struct ibv_device **cxl_device_list(int *n) { return ibv_get_device_list(n); }
static const char *cxl_dev_name(struct ibv_device **list, int i) { return ibv_get_device_name(list[i]); }
static struct ibv_context *cxl_open(struct ibv_device **list, int i) { return ibv_open_device(list[i]); }
*/
import "C"

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/wire"
)

// device is an open RDMA device, its protection domain and the address
// of the chosen port.
type device struct {
	name     string // the kernel's ("rxe0")
	ctx      *C.struct_ibv_context
	pd       *C.struct_ibv_pd
	port     C.uint8_t
	gidIndex C.int
	local    Endpoint // LID, MTU and GID; QPN and PSN per queue pair
	depth    C.int
}

func errnoErr(what string, rc C.int, err error) error {
	if rc > 0 {
		err = syscall.Errno(rc)
	}
	if err == nil {
		err = errors.New("failed")
	}
	return fmt.Errorf("verbs: %s: %w", what, err)
}

// Devices lists the RDMA devices.
func Devices() ([]string, error) {
	var n C.int
	list, err := C.cxl_device_list(&n)
	if list == nil {
		// No uverbs in the kernel (ENOSYS) is no device all the same.
		return nil, fmt.Errorf("verbs: device list: %w: %w", ErrNoDevice, err)
	}
	defer C.ibv_free_device_list(list)
	var names []string
	for i := C.int(0); i < n; i++ {
		names = append(names, C.GoString(C.cxl_dev_name(list, i)))
	}
	return names, nil
}

func openDevice(cfg Config) (*device, error) {
	if cfg.Port <= 0 {
		cfg.Port = 1
	}
	if cfg.Depth <= 0 {
		cfg.Depth = 64
	}
	var n C.int
	list, err := C.cxl_device_list(&n)
	if list == nil {
		// No uverbs in the kernel (ENOSYS) is no device all the same.
		return nil, fmt.Errorf("verbs: device list: %w: %w", ErrNoDevice, err)
	}
	defer C.ibv_free_device_list(list)
	pick := C.int(-1)
	for i := C.int(0); i < n; i++ {
		if cfg.Device == "" || C.GoString(C.cxl_dev_name(list, i)) == cfg.Device {
			pick = i
			break
		}
	}
	if pick < 0 {
		return nil, fmt.Errorf("verbs: device %q: %w", cfg.Device, ErrNoDevice)
	}
	d := &device{name: C.GoString(C.cxl_dev_name(list, pick)), port: C.uint8_t(cfg.Port), depth: C.int(cfg.Depth)}
	d.ctx, err = C.cxl_open(list, pick)
	if d.ctx == nil {
		return nil, errnoErr("open device", 0, err)
	}
	d.pd, err = C.ibv_alloc_pd(d.ctx)
	if d.pd == nil {
		d.close()
		return nil, errnoErr("alloc pd", 0, err)
	}
	var lid C.uint16_t
	var mtu, state, gids C.int
	if rc := C.cxl_port(d.ctx, d.port, &lid, &mtu, &state, &gids); rc != 0 {
		d.close()
		return nil, errnoErr("query port", rc, nil)
	}
	if state != C.IBV_PORT_ACTIVE {
		d.close()
		return nil, fmt.Errorf("verbs: port %d is not active (state %d): %w", cfg.Port, state, ErrNoDevice)
	}
	d.local.LID, d.local.MTU = uint16(lid), uint8(mtu)
	idx, g := pickGID(cfg.GIDIndex, int(gids), func(i int) (g [16]byte, ok bool) {
		ok = C.cxl_gid(d.ctx, d.port, C.int(i), (*C.uint8_t)(unsafe.Pointer(&g[0]))) == 0
		return g, ok
	})
	d.gidIndex, d.local.GID = C.int(idx), g
	if d.local.GID == ([16]byte{}) {
		d.close()
		return nil, fmt.Errorf("verbs: port %d has no usable GID (index %d): %w", cfg.Port, cfg.GIDIndex, ErrNoDevice)
	}
	return d, nil
}

func (d *device) close() {
	if d.pd != nil {
		C.ibv_dealloc_pd(d.pd)
		d.pd = nil
	}
	if d.ctx != nil {
		C.ibv_close_device(d.ctx)
		d.ctx = nil
	}
}

func randomPSN() (uint32, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("verbs: random: %w", err)
	}
	return binary.LittleEndian.Uint32(b[:]) & 0xffffff, nil
}

// queuePair is a reliable-connected queue pair with its completion queue.
type queuePair struct {
	cq *C.struct_ibv_cq
	qp *C.struct_ibv_qp
}

// connect creates a queue pair whose peer is peer and whose remote access
// rights are access, and moves it to ready-to-send.
// The queue pair is in pd: it reaches only memory registered there.
func (d *device) connect(pd *C.struct_ibv_pd, peer Endpoint, access C.int) (*queuePair, Endpoint, error) {
	q := &queuePair{}
	var err error
	q.cq, err = C.ibv_create_cq(d.ctx, d.depth, nil, nil, 0)
	if q.cq == nil {
		return nil, Endpoint{}, errnoErr("create cq", 0, err)
	}
	q.qp, err = C.cxl_create_qp(pd, q.cq, d.depth)
	if q.qp == nil {
		q.destroy()
		return nil, Endpoint{}, errnoErr("create qp", 0, err)
	}
	local := d.local
	local.QPN = uint32(C.cxl_qpn(q.qp))
	if local.PSN, err = randomPSN(); err != nil {
		q.destroy()
		return nil, Endpoint{}, err
	}
	mtu := min(d.local.MTU, peer.MTU)
	if rc := C.cxl_qp_init(q.qp, d.port, access); rc != 0 {
		q.destroy()
		return nil, Endpoint{}, errnoErr("qp to INIT", rc, nil)
	}
	if rc := C.cxl_qp_rtr(q.qp, d.port, d.gidIndex, C.uint32_t(peer.QPN), C.uint32_t(peer.PSN), C.uint16_t(peer.LID),
		(*C.uint8_t)(unsafe.Pointer(&peer.GID[0])), C.int(mtu)); rc != 0 {
		q.destroy()
		return nil, Endpoint{}, errnoErr("qp to RTR", rc, nil)
	}
	if rc := C.cxl_qp_rts(q.qp, C.uint32_t(local.PSN)); rc != 0 {
		q.destroy()
		return nil, Endpoint{}, errnoErr("qp to RTS", rc, nil)
	}
	return q, local, nil
}

// destroy stops the queue pair (in-flight remote accesses fail) and frees it.
func (q *queuePair) destroy() {
	if q.qp != nil {
		C.cxl_qp_error(q.qp)
		C.ibv_destroy_qp(q.qp)
		q.qp = nil
	}
	if q.cq != nil {
		C.ibv_destroy_cq(q.cq)
		q.cq = nil
	}
}

func remoteAccess(p rdma.Perm) C.int {
	a := C.int(C.IBV_ACCESS_LOCAL_WRITE)
	if p.Has(rdma.PermRead) {
		a |= C.IBV_ACCESS_REMOTE_READ
	}
	if p.Has(rdma.PermWrite) {
		a |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if p.Has(rdma.PermReadWrite) {
		a |= C.IBV_ACCESS_REMOTE_ATOMIC
	}
	return a
}

// Server serves OpConnect on the TCP control channel: it implements
// tcp.Extension. Register it as tcp.Config.Extensions[wire.OpConnect].
type Server struct {
	dev *device
	log *slog.Logger

	mu     sync.Mutex
	regs   map[*rdma.Handle]*registration
	closed bool
}

// registration is one export's memory registered with the device, and
// the queue pairs through which clients reach it. It holds a Pin on the
// export for its whole life, so a revoke waits for the teardown. Each
// export has a protection domain of its own: a queue pair connected for
// one export cannot reach another's memory even with its remote key
// (the device refuses an rkey of another domain).
type registration struct {
	pd      *C.struct_ibv_pd
	h       *rdma.Handle
	mrs     []*C.struct_ibv_mr
	regions []Region
	qps     map[*queuePair]struct{}
	stop    func() bool
}

// NewServer opens the device.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d, err := openDevice(cfg)
	if err != nil {
		return nil, err
	}
	return &Server{dev: d, log: cfg.Logger, regs: map[*rdma.Handle]*registration{}}, nil
}

// Device is the name of the device the server opened ("rxe0"): the one
// Config.Device named, or the first.
func (s *Server) Device() string { return s.dev.name }

// Request answers OpConnect: it registers the export (once), connects a
// queue pair to the client's and returns the server's endpoint and the
// export's regions. The queue pair lives until the control connection
// closes (ctx) or the export is revoked.
func (s *Server) Request(ctx context.Context, h *rdma.Handle, body []byte) ([]byte, error) {
	peer, err := ParseEndpoint(body)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("verbs: server closed: %w", rdma.ErrRevoked)
	}
	reg, err := s.register(h)
	if err != nil {
		return nil, err
	}
	q, local, err := s.dev.connect(reg.pd, peer, remoteAccess(h.Perms()))
	if err != nil {
		if len(reg.qps) == 0 {
			s.teardownLocked(reg)
		}
		return nil, err
	}
	reg.qps[q] = struct{}{}
	context.AfterFunc(ctx, func() { s.disconnect(reg, q) })
	s.log.Debug("verbs queue pair connected", "export", h.Export().ID, "qpn", local.QPN, "peer_qpn", peer.QPN)
	return Reply{Endpoint: local, Regions: reg.regions}.AppendBinary(nil), nil
}

// register registers h's memory unless it already is. Caller holds mu.
func (s *Server) register(h *rdma.Handle) (*registration, error) {
	if reg := s.regs[h]; reg != nil {
		return reg, nil
	}
	segs, err := h.Hold(nil, 0, h.Size(), h.Perms())
	if err != nil {
		return nil, err
	}
	reg := &registration{h: h, qps: map[*queuePair]struct{}{}}
	if reg.pd, err = C.ibv_alloc_pd(s.dev.ctx); reg.pd == nil {
		s.teardownLocked(reg)
		return nil, errnoErr("alloc pd", 0, err)
	}
	var off uint64
	for _, seg := range segs {
		mr, err := C.cxl_reg_mr(reg.pd, unsafe.Pointer(&seg[0]), C.size_t(len(seg)), remoteAccess(h.Perms()))
		if mr == nil {
			s.teardownLocked(reg)
			return nil, errnoErr("register memory", 0, err)
		}
		reg.mrs = append(reg.mrs, mr)
		reg.regions = append(reg.regions, Region{Offset: off, Addr: uint64(uintptr(unsafe.Pointer(&seg[0]))),
			Length: uint64(len(seg)), RKey: uint32(C.cxl_rkey(mr))})
		off += uint64(len(seg))
	}
	s.regs[h] = reg
	reg.stop = context.AfterFunc(h.Context(), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.teardownLocked(reg)
	})
	return reg, nil
}

// teardownLocked stops every queue pair of reg, deregisters its memory and
// unpins the export: after it, the device cannot reach the memory. It is
// idempotent. Caller holds mu.
func (s *Server) teardownLocked(reg *registration) {
	if reg.h == nil {
		return
	}
	for q := range reg.qps {
		q.destroy()
	}
	reg.qps = nil
	for _, mr := range reg.mrs {
		C.ibv_dereg_mr(mr)
	}
	reg.mrs = nil
	if reg.pd != nil {
		C.ibv_dealloc_pd(reg.pd)
		reg.pd = nil
	}
	if reg.stop != nil {
		reg.stop()
	}
	if s.regs[reg.h] == reg {
		delete(s.regs, reg.h)
	}
	reg.h.Unpin()
	reg.h = nil
}

// disconnect ends one client's queue pair; the last one takes the
// registration with it.
func (s *Server) disconnect(reg *registration, q *queuePair) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := reg.qps[q]; !ok {
		return
	}
	q.destroy()
	delete(reg.qps, q)
	if len(reg.qps) == 0 {
		s.teardownLocked(reg)
	}
}

// Registered is the number of exports whose memory is registered with
// the device (each with its queue pairs): a revoked export's is gone
// before the revocation returns.
func (s *Server) Registered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.regs)
}

// Close tears down every registration and releases the device.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, reg := range s.regs {
		s.teardownLocked(reg)
	}
	s.dev.close()
	return nil
}

// bounceSize is the client's registered staging buffer: verbs needs
// registered local memory, and Go memory must not be handed to C for
// longer than a call.
const bounceSize = 4 << 20

// Client reaches an export with one-sided verbs. Operations are
// serialised on its one queue pair.
type Client struct {
	ctl   *client.Client
	dev   *device
	q     *queuePair
	reply Reply
	perms rdma.Perm

	opTimeout time.Duration

	mu     sync.Mutex
	buf    unsafe.Pointer
	mr     *C.struct_ibv_mr
	broken error
}

// Dial opens the TCP control channel (one connection of ccfg), connects a
// queue pair through it and returns a client whose data path is verbs.
func Dial(ctx context.Context, ccfg client.Config, cfg Config) (_ *Client, err error) {
	ccfg.Conns = 1
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 5 * time.Second
	}
	c := &Client{opTimeout: cfg.OpTimeout}
	defer func() {
		// Not the result, which a failure's return sets to nil.
		if err != nil {
			c.Close()
		}
	}()
	if c.ctl, err = client.Dial(ctx, ccfg); err != nil {
		return nil, err
	}
	c.perms = c.ctl.Perms()
	if c.dev, err = openDevice(cfg); err != nil {
		return nil, err
	}
	c.buf = C.malloc(bounceSize)
	if c.buf == nil {
		return nil, errors.New("verbs: out of memory for the staging buffer")
	}
	var merr error
	if c.mr, merr = C.cxl_reg_mr(c.dev.pd, c.buf, bounceSize, C.IBV_ACCESS_LOCAL_WRITE); c.mr == nil {
		return nil, errnoErr("register staging buffer", 0, merr)
	}
	// The queue pair is created before its peer is known: connect it
	// in two steps around the exchange.
	q := &queuePair{}
	c.q = q
	if q.cq, merr = C.ibv_create_cq(c.dev.ctx, c.dev.depth, nil, nil, 0); q.cq == nil {
		return nil, errnoErr("create cq", 0, merr)
	}
	if q.qp, merr = C.cxl_create_qp(c.dev.pd, q.cq, c.dev.depth); q.qp == nil {
		return nil, errnoErr("create qp", 0, merr)
	}
	if rc := C.cxl_qp_init(q.qp, c.dev.port, C.IBV_ACCESS_LOCAL_WRITE); rc != 0 {
		return nil, errnoErr("qp to INIT", rc, nil)
	}
	local := c.dev.local
	local.QPN = uint32(C.cxl_qpn(q.qp))
	if local.PSN, err = randomPSN(); err != nil {
		return nil, err
	}
	body, err := c.ctl.Control(ctx, wire.OpConnect, local.AppendBinary(nil))
	if err != nil {
		return nil, fmt.Errorf("verbs: connect: %w", err)
	}
	if c.reply, err = ParseReply(body); err != nil {
		return nil, err
	}
	peer := c.reply.Endpoint
	if rc := C.cxl_qp_rtr(q.qp, c.dev.port, c.dev.gidIndex, C.uint32_t(peer.QPN), C.uint32_t(peer.PSN), C.uint16_t(peer.LID),
		(*C.uint8_t)(unsafe.Pointer(&peer.GID[0])), C.int(min(local.MTU, peer.MTU))); rc != 0 {
		return nil, errnoErr("qp to RTR", rc, nil)
	}
	if rc := C.cxl_qp_rts(q.qp, C.uint32_t(local.PSN)); rc != 0 {
		return nil, errnoErr("qp to RTS", rc, nil)
	}
	return c, nil
}

// Size is the export's length.
func (c *Client) Size() uint64 { return c.reply.Size() }

// post runs one work request and waits for its completion. A failed
// completion leaves the queue pair in the error state: the client is
// then broken (the usual cause is a revoked export).
func (c *Client) post(ctx context.Context, op C.int, n int, g Region, goff uint64, compare, swap uint64) error {
	if c.broken != nil {
		return c.broken
	}
	if rc := C.cxl_post(c.q.qp, op, c.buf, C.uint32_t(n), C.cxl_lkey(c.mr), C.uint64_t(g.Addr+goff), C.uint32_t(g.RKey),
		C.uint64_t(compare), C.uint64_t(swap)); rc != 0 {
		c.broken = fmt.Errorf("%w: %w", rdma.ErrRevoked, errnoErr("post", rc, nil))
		return c.broken
	}
	var status C.int
	deadline := time.Now().Add(c.opTimeout)
	for spins := 0; ; spins++ {
		switch n := C.cxl_poll(c.q.cq, &status); {
		case n < 0:
			c.broken = errnoErr("poll", 0, nil)
			return c.broken
		case n > 0:
			if status != C.IBV_WC_SUCCESS {
				c.broken = fmt.Errorf("verbs: completion status %d: %w", status, rdma.ErrRevoked)
				return c.broken
			}
			return nil
		}
		if ctx.Err() != nil {
			// The request may still complete into the staging buffer:
			// stop the queue pair so that it cannot.
			c.stop()
			c.broken = fmt.Errorf("verbs: operation abandoned: %w", ctx.Err())
			return ctx.Err()
		}
		if spins%1024 == 1023 && time.Now().After(deadline) {
			c.stop()
			c.broken = fmt.Errorf("verbs: no completion in %v (the export revoked, or the box unreachable): %w", c.opTimeout, rdma.ErrRevoked)
			return c.broken
		}
		if spins < 1000 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// stop moves the queue pair to the error state and waits (boundedly) for
// the flushed completion, so that nothing lands in the staging buffer
// later.
func (c *Client) stop() {
	C.cxl_qp_error(c.q.qp)
	var status C.int
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		if C.cxl_poll(c.q.cq, &status) != 0 {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (c *Client) transfer(ctx context.Context, op C.int, p []byte, off uint64) error {
	need := rdma.PermRead
	if op == C.IBV_WR_RDMA_WRITE {
		need = rdma.PermWrite
	}
	if !c.perms.Has(need) {
		return rdma.ErrPerm
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return locate(c.reply.Regions, off, uint64(len(p)), func(g Region, goff, k uint64) error {
		for k > 0 {
			n := min(k, bounceSize)
			staging := unsafe.Slice((*byte)(c.buf), n)
			if op == C.IBV_WR_RDMA_WRITE {
				copy(staging, p[:n])
			}
			if err := c.post(ctx, op, int(n), g, goff, 0, 0); err != nil {
				return err
			}
			if op == C.IBV_WR_RDMA_READ {
				copy(p[:n], staging)
			}
			p, goff, k = p[n:], goff+n, k-n
		}
		return nil
	})
}

// Read fills p from export offset off with RDMA READs.
func (c *Client) Read(ctx context.Context, p []byte, off uint64) error {
	return c.transfer(ctx, C.IBV_WR_RDMA_READ, p, off)
}

// Write stores p at export offset off with RDMA WRITEs; it returns once
// the server's device has acknowledged the data (reliable connection).
func (c *Client) Write(ctx context.Context, p []byte, off uint64) error {
	return c.transfer(ctx, C.IBV_WR_RDMA_WRITE, p, off)
}

func (c *Client) atomic(ctx context.Context, op C.int, off, compareAdd, swap uint64) (uint64, error) {
	if !c.perms.Has(rdma.PermReadWrite) {
		return 0, rdma.ErrPerm
	}
	if off%8 != 0 {
		return 0, rdma.ErrAlign
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var prev uint64
	err := locate(c.reply.Regions, off, 8, func(g Region, goff, k uint64) error {
		if k != 8 || (g.Addr+goff)%8 != 0 {
			return rdma.ErrAlign
		}
		if err := c.post(ctx, op, 8, g, goff, compareAdd, swap); err != nil {
			return err
		}
		prev = *(*uint64)(c.buf)
		return nil
	})
	return prev, err
}

// CompareAndSwap is an RDMA compare-and-swap of the 8-byte word at off.
func (c *Client) CompareAndSwap(ctx context.Context, off, compare, swap uint64) (uint64, error) {
	return c.atomic(ctx, C.IBV_WR_ATOMIC_CMP_AND_SWP, off, compare, swap)
}

// FetchAdd is an RDMA fetch-and-add of the 8-byte word at off.
func (c *Client) FetchAdd(ctx context.Context, off, delta uint64) (uint64, error) {
	return c.atomic(ctx, C.IBV_WR_ATOMIC_FETCH_AND_ADD, off, delta, 0)
}

// Close tears down the queue pair and the control channel (the server
// then tears down its side).
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.q != nil {
		c.q.destroy()
		c.q = nil
	}
	if c.mr != nil {
		C.ibv_dereg_mr(c.mr)
		c.mr = nil
	}
	if c.buf != nil {
		C.free(c.buf)
		c.buf = nil
	}
	if c.dev != nil {
		c.dev.close()
		c.dev = nil
	}
	if c.ctl != nil {
		c.ctl.Close()
		c.ctl = nil
	}
	if c.broken == nil {
		c.broken = client.ErrClosed
	}
	return nil
}
