"""Client tests against a fake index in a thread (the real daemon is Go;
the Go side's end-to-end test drives this client against it when both
are built), with the chunk's memory in a temporary file mapped by mmap."""

import os
import socket
import tempfile
import threading
import time
import unittest

from cxlpool_kv import Client, FileMapper, KVError, where_from_agent, wire

TAG = bytes(range(0xA0, 0xB0))
TOKEN = bytes(range(32))
CHUNK = 1 << 20


class FakeIndex:
    """Just enough of the index to exercise every client path: a bump
    allocator in one chunk, committed keys, pins, generations."""

    def __init__(self, sock):
        self.sock = sock
        self.blocks = {}      # block -> [key, gen, offset, length, committed]
        self.keys = {}        # key -> block (committed)
        self.reserved = {}    # key -> block (uncommitted)
        self.pins = {}        # block -> count
        self.next_block, self.next_gen, self.top = 1, 1, 0
        self.stale_once = set()  # keys whose next CHECK answers STALE (a racing eviction)
        self.requests = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            b = self.sock.recv(n - len(buf))
            if not b:
                raise EOFError
            buf += b
        return buf

    def serve(self):
        try:
            while True:
                req = wire.decode_request(wire.read_frame(self.recv_exact))
                self.requests.append(req)
                self.sock.sendall(wire.encode_response(self.answer(req)))
        except (EOFError, OSError):
            pass

    def loc(self, b):
        key, gen, off, length, _ = self.blocks[b]
        return wire.Loc(b, gen, TAG, off, length)

    def answer(self, req):
        r = wire.Response(op=req.op, id=req.id)
        items = r.items
        if req.op == wire.HELLO:
            if req.token != TOKEN:
                return wire.Response(op=req.op, id=req.id, status=wire.DENIED, message="kv: namespace, host or token refused")
            r.session, r.lease_ms, r.max_body, r.max_batch, r.max_key = 1, 30000, wire.DEFAULT_MAX_BODY, 3, 1024
            r.chunks = [wire.Chunk(5, TAG, CHUNK)]
        elif req.op == wire.PUT:
            for key, n in req.puts:
                if key in self.keys or key in self.reserved:
                    items.append(wire.Item(wire.EXISTS_STATUS))
                elif self.top + n > CHUNK:
                    items.append(wire.Item(wire.NO_SPACE))
                else:
                    b = self.next_block
                    self.next_block += 1
                    self.blocks[b] = [key, self.next_gen, self.top, n, False]
                    self.next_gen += 1
                    self.top += n
                    self.reserved[key] = b
                    items.append(wire.Item(wire.OK, self.loc(b)))
        elif req.op in (wire.COMMIT, wire.ABORT):
            for b in req.blocks:
                blk = self.blocks.get(b)
                if blk is None or blk[4]:
                    items.append(wire.Item(wire.NOT_FOUND))
                    continue
                del self.reserved[blk[0]]
                if req.op == wire.COMMIT:
                    blk[4] = True
                    self.keys[blk[0]] = b
                else:
                    del self.blocks[b]
                items.append(wire.Item(wire.OK))
        elif req.op == wire.GET:
            for k in req.keys:
                b = self.keys.get(k)
                if b is None:
                    items.append(wire.Item(wire.NOT_FOUND))
                    continue
                if req.flags & wire.FLAG_PIN:
                    self.pins[b] = self.pins.get(b, 0) + 1
                items.append(wire.Item(wire.OK, self.loc(b)))
        elif req.op == wire.EXISTS:
            items.extend(wire.Item(wire.OK if k in self.keys else wire.NOT_FOUND) for k in req.keys)
        elif req.op == wire.DELETE:
            for k in req.keys:
                b = self.keys.pop(k, None)
                if b is not None:
                    del self.blocks[b]
                items.append(wire.Item(wire.OK if b is not None else wire.NOT_FOUND))
        elif req.op == wire.UNPIN:
            for b in req.blocks:
                if self.pins.get(b, 0) > 0:
                    self.pins[b] -= 1
                    items.append(wire.Item(wire.OK))
                else:
                    items.append(wire.Item(wire.NOT_FOUND))
        elif req.op == wire.CHECK:
            for b, g in req.checks:
                blk = self.blocks.get(b)
                stale = blk is None or blk[1] != g or blk[0] in self.stale_once
                if blk is not None:
                    self.stale_once.discard(blk[0])
                items.append(wire.Item(wire.STALE if stale else wire.OK))
        elif req.op == wire.RENEW:
            r.lease_ms = 30000
        elif req.op == wire.CHUNKS:
            r.chunks = [wire.Chunk(5, TAG, CHUNK)]
        elif req.op == wire.STAT:
            r.stat = wire.Stat(blocks=len(self.keys), used=sum(self.blocks[b][3] for b in self.keys.values()), capacity=CHUNK)
        return r


class ClientTest(unittest.TestCase):
    def setUp(self):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        self.path = os.path.join(d.name, "chunk")
        with open(self.path, "wb") as f:
            f.truncate(CHUNK)
        a, b = socket.socketpair()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        self.index = FakeIndex(b)
        self.mapper = FileMapper({str(wire.Loc(0, 0, TAG, 0, 0).tag_uuid): self.path})
        self.addCleanup(self.mapper.close)
        self.c = Client(None, "llama", 3, TOKEN, self.mapper, sock=a)

    def test_hello(self):
        self.assertEqual((self.c.session, self.c.lease_ms, self.c.max_batch), (1, 30000, 3))
        self.assertEqual([c.size for c in self.c.chunks], [CHUNK])

    def test_denied(self):
        a, b = socket.socketpair()
        self.addCleanup(b.close)
        FakeIndex(b)
        with self.assertRaises(KVError) as e:
            Client(None, "llama", 3, bytes(32), self.mapper, sock=a)
        self.assertEqual(e.exception.status, wire.DENIED)
        self.assertIn("token refused", str(e.exception))

    def test_lmcache_shape(self):
        c = self.c
        blob = os.urandom(4096)
        self.assertFalse(c.contains("k1"))
        self.assertTrue(c.put("k1", blob))
        self.assertFalse(c.put("k1", blob), "a second put of a stored key is skipped")
        self.assertTrue(c.contains("k1"))
        self.assertEqual(bytes(c.get("k1")), blob)
        # The bytes are in the chunk's memory, where the client wrote them.
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(4096), blob)
        self.assertIsNone(c.get("nope"))
        keys = ["b%d" % i for i in range(7)]  # over max_batch 3: three requests
        vals = [os.urandom(100 + i) for i in range(7)]
        self.assertEqual(c.batched_put(keys, vals), [True] * 7)
        self.assertEqual(c.batched_contains(keys + ["x"]), [True] * 7 + [False])
        self.assertEqual([bytes(v) for v in c.batched_get(keys)], vals)
        self.assertTrue(c.pin("k1"))
        self.assertFalse(c.pin("nope"))
        self.assertTrue(c.contains("k1", pin=True))
        self.assertTrue(c.unpin("k1") and c.unpin("k1"))
        self.assertFalse(c.unpin("k1"), "no pin left")
        self.assertTrue(c.remove("k1"))
        self.assertFalse(c.remove("k1"))
        self.assertFalse(c.contains("k1"))

    def test_hicache_shape(self):
        c = self.c
        v = bytearray(os.urandom(2048))
        self.assertTrue(c.set("h1", v))
        self.assertTrue(c.set("h1", v), "set of a stored key succeeds")
        self.assertTrue(c.exists("h1"))
        target = bytearray(4096)
        got = c.get("h1", into=target)
        self.assertEqual(bytes(got), bytes(v))
        self.assertEqual(bytes(target[:2048]), bytes(v), "read into the caller's buffer")
        self.assertTrue(c.batch_set(["h2", "h3"], [b"x" * 10, b"y" * 20]))
        self.assertEqual([bytes(x) if x is not None else None for x in c.batch_get(["h2", "zz", "h3"])], [b"x" * 10, None, b"y" * 20])
        self.assertEqual(c.batch_exists(["h1", "h2", "zz", "h3"]), 2)

    def test_stale_read_is_retried(self):
        c = self.c
        c.put("k", b"old bytes")
        self.index.stale_once.add(b"k")
        self.assertEqual(bytes(c.get("k")), b"old bytes")
        checks = [r for r in self.index.requests if r.op == wire.CHECK]
        self.assertEqual(len(checks), 2, "a STALE check sends the reader back to the index")

    def test_keepalive(self):
        self.c.start_keepalive(interval=0.01)
        deadline = time.monotonic() + 10
        while sum(r.op == wire.RENEW for r in list(self.index.requests)) < 2:
            self.assertLess(time.monotonic(), deadline, "no RENEW within 10 s")
            time.sleep(0.01)
        self.c.close()
        self.assertFalse(self.c._keepalive.is_alive(), "close stops the keepalive")

    def test_location_cache(self):
        a, b = socket.socketpair()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        index = FakeIndex(b)
        c = Client(None, "llama", 3, TOKEN, self.mapper, sock=a, location_cache=2)
        self.assertTrue(c.batched_put(["x", "y", "z"], [b"X", b"Y", b"Z"]))
        ops = lambda: [r.op for r in index.requests[n:]]
        n = len(index.requests)
        self.assertEqual([bytes(v) for v in c.batched_get(["y", "z"])], [b"Y", b"Z"])
        self.assertEqual(ops(), [wire.CHECK], "cached locations: one round trip, no GET")
        n = len(index.requests)
        self.assertEqual(bytes(c.get("x")), b"X")
        self.assertEqual(ops(), [wire.GET, wire.CHECK], "x fell out of the 2-entry cache")
        # A cached location gone stale: CHECK says so, the reader asks the index.
        index.stale_once.add(b"x")
        n = len(index.requests)
        self.assertEqual(bytes(c.get("x")), b"X")
        self.assertEqual(ops(), [wire.CHECK, wire.GET, wire.CHECK])
        c.remove("x")
        self.assertIsNone(c.get("x"))

    def test_no_space(self):
        self.assertEqual(self.c.batched_put(["a", "b"], [bytes(CHUNK - 10), bytes(100)]), [True, False])

    def test_ops(self):
        c = self.c
        c.put("s", b"12345")
        self.assertEqual(c.renew(), 30000)
        self.assertEqual(len(c.refresh_chunks()), 1)
        st = c.stat()
        self.assertEqual((st.blocks, st.used, st.capacity), (1, 5, CHUNK))
        it = c.reserve([("r", 8)])[0]
        self.assertEqual(c.abort([it.loc.block]), [wire.OK])
        self.assertFalse(c.exists("r"), "an aborted reservation is never visible")
        with self.assertRaises(ValueError):
            c.write(c.reserve([("w", 8)])[0].loc, b"short")


class MapperTest(unittest.TestCase):
    def test_extents_end_to_end(self):
        # A chunk of two extents, the second before the first in the file
        # (the memory file's DPAs): reads and writes span the seam.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "mem")
            page = mmap_page()
            with open(path, "wb") as f:
                f.truncate(4 * page)
            m = FileMapper(lambda tag: (path, [(2 * page, page), (0, page)]))
            try:
                mp = m("t")
                data = memoryview(os.urandom(200))
                mp.write(page - 100, data)
                out = memoryview(bytearray(200))
                mp.read_into(page - 100, out)
                self.assertEqual(bytes(out), bytes(data))
                with open(path, "rb") as f:
                    raw = f.read()
                self.assertEqual(raw[3 * page - 100:3 * page], bytes(data[:100]))
                self.assertEqual(raw[:100], bytes(data[100:]))
                with self.assertRaises(IndexError):
                    mp.read_into(2 * page - 1, memoryview(bytearray(2)))
            finally:
                m.close()


class AgentSpecTest(unittest.TestCase):
    def test_where_from_agent(self):
        cases = {
            "dax device": ("CXLPOOL_DAX_PATH=/dev/dax0.0 CXLPOOL_DAX_SIZE=1073741824", ("/dev/dax0.0", [(0, 1 << 30)])),
            "one extent": ("CXLPOOL_DAX_PATH=/proc/9/fd/7\nCXLPOOL_DAX_SIZE=4096\nCXLPOOL_DAX_OFFSET=8192", ("/proc/9/fd/7", [(8192, 4096)])),
            "extents": ({"CXLPOOL_DAX_PATH": "/m", "CXLPOOL_DAX_SIZE": "300", "CXLPOOL_DAX_EXTENTS": "100:200,0:100"}, ("/m", [(100, 200), (0, 100)])),
        }
        for name, (env, want) in cases.items():
            with self.subTest(name):
                self.assertEqual(where_from_agent(env), want)


def mmap_page():
    import mmap
    return mmap.ALLOCATIONGRANULARITY


if __name__ == "__main__":
    unittest.main()
