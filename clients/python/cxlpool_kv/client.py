"""The KV store's Python client: the index protocol over a socket, the
bytes through this host's mapping of the namespace's chunks (mmap).

The box never copies a block: ``put`` reserves space in the index, writes
the bytes into the mapped chunk itself and commits; ``get`` asks where the
block is, copies it out of the mapping and checks the generation (or holds
a pin while it reads), so a reader that loses a race with eviction learns
it and never returns another key's bytes.

Two method shapes sit on the same session so that a framework connector is
a thin adapter:

* LMCache storage backend: ``contains``, ``put``, ``get``, ``batched_contains``,
  ``batched_put``, ``batched_get``, ``pin``, ``unpin``, ``remove``.
* SGLang HiCache storage: ``get``, ``set``, ``batch_get``, ``batch_set``,
  ``exists`` (and ``batch_exists``).

A Client is one session (one connection); it serialises its requests with a
lock, so it may be shared by threads; use one per worker for parallelism.
"""

import mmap
from collections import OrderedDict
import os
import socket
import threading
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import wire

Key = Union[bytes, str]


class KVError(Exception):
    """A refusal from the index: the op, the status and, for a whole
    request, the server's message naming the rule that refused it."""

    def __init__(self, op: int, status: int, message: str = ""):
        self.op, self.status, self.message = op, status, message
        text = "cxlpool kv: %s: %s" % (wire.OP_NAMES.get(op, hex(op)), wire.status_name(status))
        super().__init__(text + (": " + message if message else ""))


class Unmapped(KVError):
    """A location outside what this host has mapped of its chunk."""


def _key(k: Key) -> bytes:
    return k.encode("utf-8") if isinstance(k, str) else bytes(k)


# --- mappings of chunks ------------------------------------------------------

class FileMapper:
    """Maps a chunk (by tag, in the box's UUID form) to a shared mmap.

    ``paths`` maps each tag to where its capacity is, as the host agent
    surfaces it: either a path (a DAX character device such as
    ``/dev/dax0.0``, whose offset 0 is the chunk's offset 0), or a path
    with extents ``(path, [(file_offset, length), ...])`` laid end to end
    (the virtual box's memory file, where the offsets are the extents'
    DPAs). A callable ``paths(tag)`` returning either form also works.
    """

    def __init__(self, paths):
        self._paths = paths
        self._maps: Dict[str, "_Mapping"] = {}
        self._lock = threading.Lock()

    def __call__(self, tag: str) -> "_Mapping":
        with self._lock:
            m = self._maps.get(tag)
            if m is None:
                where = self._paths(tag) if callable(self._paths) else self._paths.get(tag)
                if where is None:
                    raise KeyError("cxlpool kv: no mapping for chunk %s" % tag)
                m = self._maps[tag] = _Mapping.open(where)
            return m

    def close(self):
        with self._lock:
            for m in self._maps.values():
                m.close()
            self._maps.clear()


def where_from_agent(env) -> object:
    """The FileMapper spec for one chunk from what ``poolctl host attach``
    prints (a mapping or the ``KEY=VALUE`` lines): ``CXLPOOL_DAX_PATH`` and
    ``CXLPOOL_DAX_SIZE`` as for a /dev/daxX.Y; on the virtual box also
    ``CXLPOOL_DAX_OFFSET`` (one extent) or ``CXLPOOL_DAX_EXTENTS``
    (``OFFSET:LENGTH,...``), the chunk's place in the memory file."""
    if isinstance(env, str):
        env = dict(line.split("=", 1) for line in env.split() if "=" in line)
    path = env["CXLPOOL_DAX_PATH"]
    if env.get("CXLPOOL_DAX_EXTENTS"):
        ext = [tuple(int(x) for x in part.split(":", 1)) for part in env["CXLPOOL_DAX_EXTENTS"].split(",")]
        return (path, ext)
    size = int(env["CXLPOOL_DAX_SIZE"])
    if "CXLPOOL_DAX_OFFSET" in env:
        return (path, [(int(env["CXLPOOL_DAX_OFFSET"]), size)])
    return (path, [(0, size)])


class _Mapping:
    """A chunk's capacity as one byte range over one or more shared mmaps."""

    def __init__(self, pieces: List[Tuple[int, mmap.mmap]]):
        self._pieces = pieces  # (start in the chunk, mmap), ascending
        self.size = sum(len(m) for _, m in pieces)

    @classmethod
    def open(cls, where) -> "_Mapping":
        if isinstance(where, (str, os.PathLike)):
            fd = os.open(where, os.O_RDWR)
            try:
                size = os.fstat(fd).st_size or _dax_size(where)
                return cls([(0, mmap.mmap(fd, size, mmap.MAP_SHARED))])
            finally:
                os.close(fd)
        path, extents = where
        fd = os.open(path, os.O_RDWR)
        try:
            pieces, start = [], 0
            for off, length in extents:
                pieces.append((start, mmap.mmap(fd, length, mmap.MAP_SHARED, offset=off)))
                start += length
            return cls(pieces)
        finally:
            os.close(fd)

    def _spans(self, off: int, n: int):
        if off < 0 or off + n > self.size:
            raise IndexError("cxlpool kv: [%d, %d) outside the chunk's %d mapped bytes" % (off, off + n, self.size))
        for start, m in self._pieces:
            lo, hi = max(off, start), min(off + n, start + len(m))
            if lo < hi:
                yield m, lo - start, hi - lo, lo - off

    def read_into(self, off: int, dst: memoryview):
        for m, at, n, pos in self._spans(off, len(dst)):
            dst[pos:pos + n] = m[at:at + n]

    def write(self, off: int, data: memoryview):
        for m, at, n, pos in self._spans(off, len(data)):
            m[at:at + n] = data[pos:pos + n]

    def close(self):
        for _, m in self._pieces:
            m.close()


def _dax_size(path) -> int:
    # A DAX character device has no st_size; sysfs says how big it is.
    name = os.path.basename(os.path.realpath(path))
    with open("/sys/bus/dax/devices/%s/size" % name) as f:
        return int(f.read())


# --- the client --------------------------------------------------------------

class Client:
    """One session with the box's KV index.

    ``addr`` is ``(host, port)`` for TCP or a path for the unix socket;
    ``token`` is this host's 32-byte token for the namespace; ``mapper`` maps
    a chunk tag (UUID string) to an object with ``read_into(offset, view)``
    and ``write(offset, view)`` (a FileMapper, or anything alike).
    """

    def __init__(self, addr, namespace: str, host: int, token: bytes,
                 mapper: Callable[[str], object], lease_ms: int = 0, timeout: float = 10.0,
                 sock: Optional[socket.socket] = None, location_cache: int = 0):
        self._mapper = mapper
        # key -> Loc of blocks this client located or wrote, at most
        # location_cache of them (0: none). A get of a cached key copies the
        # bytes and sends only CHECK: one round trip instead of two, and a
        # read the index does not count as a use (the CHMU does).
        self._locs: "OrderedDict[bytes, wire.Loc]" = OrderedDict()
        self._loc_max = max(location_cache, 0)
        self._loc_lock = threading.Lock()
        self._lock = threading.Lock()
        self._next_id = 0
        self._pins: Dict[bytes, List[int]] = {}  # key -> pinned block ids (LMCache pin/unpin)
        self._keepalive: Optional[threading.Thread] = None
        self._closed = threading.Event()
        if sock is None:
            if isinstance(addr, (str, os.PathLike)):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(os.fspath(addr))
            else:
                sock = socket.create_connection(addr, timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            sock.settimeout(timeout)
        self._sock = sock
        try:
            r = self._call(wire.Request(op=wire.HELLO, namespace=namespace, host=host,
                                        token=bytes(token), lease_ms=lease_ms))
        except Exception:
            sock.close()
            raise
        self.session, self.lease_ms = r.session, r.lease_ms
        self.max_batch = r.max_batch or 4096
        self.chunks = r.chunks

    # -- plumbing --

    def close(self):
        self._closed.set()
        self._sock.close()
        if self._keepalive is not None and self._keepalive is not threading.current_thread():
            self._keepalive.join()

    def start_keepalive(self, interval: Optional[float] = None) -> None:
        """Renews the session's leases (its pins and reservations) from a
        daemon thread every interval seconds (default a third of the
        lease) until close: for a process that holds pins while idle."""
        if self._keepalive is not None:
            return
        period = interval if interval is not None else self.lease_ms / 3000.0

        def run():
            while not self._closed.wait(period):
                try:
                    self.renew()
                except (OSError, KVError, wire.ProtocolError):
                    return  # the session is gone; the next call says so

        self._keepalive = threading.Thread(target=run, name="cxlpool-kv-keepalive", daemon=True)
        self._keepalive.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            b = self._sock.recv(n - len(buf))
            if not b:
                raise ConnectionError("cxlpool kv: the index closed the connection")
            buf += b
        return bytes(buf)

    def _call(self, req: wire.Request) -> wire.Response:
        with self._lock:
            self._next_id = (self._next_id + 1) & 0xFFFFFFFF
            req.id = self._next_id
            self._sock.sendall(wire.encode_request(req))
            resp = wire.decode_response(wire.read_frame(self._recv_exact))
        if resp.op != req.op or resp.id != req.id:
            raise wire.ProtocolError("cxlpool kv: answer %s id %d to %s id %d" % (
                wire.OP_NAMES.get(resp.op), resp.id, wire.OP_NAMES[req.op], req.id))
        if resp.status != wire.OK:
            raise KVError(req.op, resp.status, resp.message)
        return resp

    def _batched(self, op: int, field: str, items: Sequence, flags: int = 0) -> List[wire.Item]:
        # Batches over the server's limit go as several requests.
        out: List[wire.Item] = []
        for i in range(0, len(items), self.max_batch):
            req = wire.Request(op=op, flags=flags)
            setattr(req, field, list(items[i:i + self.max_batch]))
            resp = self._call(req)
            if len(resp.items) != len(getattr(req, field)):
                raise wire.ProtocolError("cxlpool kv: %d answers to %d items" % (len(resp.items), len(getattr(req, field))))
            out.extend(resp.items)
        return out

    # -- the protocol's ops --

    def reserve(self, puts: Sequence[Tuple]) -> List[wire.Item]:
        """PUT of (key, length) or (key, length, parent, tokens) items."""
        return self._batched(wire.PUT, "puts", [(_key(p[0]),) + tuple(p[1:]) for p in puts])

    def commit(self, blocks: Sequence[int]) -> List[int]:
        return [it.status for it in self._batched(wire.COMMIT, "blocks", blocks)]

    def abort(self, blocks: Sequence[int]) -> List[int]:
        return [it.status for it in self._batched(wire.ABORT, "blocks", blocks)]

    def locate(self, keys: Sequence[Key], pin: bool = False) -> List[wire.Item]:
        return self._batched(wire.GET, "keys", [_key(k) for k in keys], wire.FLAG_PIN if pin else 0)

    def exists_many(self, keys: Sequence[Key]) -> List[bool]:
        return [it.status == wire.OK for it in self._batched(wire.EXISTS, "keys", [_key(k) for k in keys])]

    def delete(self, keys: Sequence[Key]) -> List[bool]:
        return [it.status == wire.OK for it in self._batched(wire.DELETE, "keys", [_key(k) for k in keys])]

    def unpin_blocks(self, blocks: Sequence[int]) -> List[int]:
        return [it.status for it in self._batched(wire.UNPIN, "blocks", blocks)]

    def check(self, locs: Sequence[wire.Loc]) -> List[bool]:
        items = self._batched(wire.CHECK, "checks", [(l.block, l.gen) for l in locs])
        return [it.status == wire.OK for it in items]

    def renew(self) -> int:
        return self._call(wire.Request(op=wire.RENEW)).lease_ms

    def refresh_chunks(self) -> List[wire.Chunk]:
        self.chunks = self._call(wire.Request(op=wire.CHUNKS)).chunks
        return self.chunks

    def stat(self) -> wire.Stat:
        return self._call(wire.Request(op=wire.STAT)).stat

    # -- the data path --

    def _mapping(self, loc: wire.Loc):
        try:
            return self._mapper(loc.tag_uuid)
        except (KeyError, OSError) as e:
            raise Unmapped(wire.GET, wire.INVALID, "chunk %s: %s" % (loc.tag_uuid, e)) from e

    def read(self, loc: wire.Loc, into: Optional[memoryview] = None) -> memoryview:
        dst = memoryview(bytearray(loc.length)) if into is None else memoryview(into).cast("B")
        if len(dst) < loc.length:
            raise ValueError("cxlpool kv: buffer of %d bytes for a %d-byte block" % (len(dst), loc.length))
        self._mapping(loc).read_into(loc.offset, dst[:loc.length])
        return dst[:loc.length]

    def write(self, loc: wire.Loc, data) -> None:
        src = memoryview(data).cast("B")
        if len(src) != loc.length:
            raise ValueError("cxlpool kv: %d bytes for a %d-byte reservation" % (len(src), loc.length))
        self._mapping(loc).write(loc.offset, src)

    # -- LMCache-shaped --

    def contains(self, key: Key, pin: bool = False) -> bool:
        if pin:
            return self.pin(key)
        return self.exists_many([key])[0]

    def batched_contains(self, keys: Sequence[Key]) -> List[bool]:
        return self.exists_many(keys)

    def put(self, key: Key, data, parent: Optional[int] = None, tokens: int = 0) -> bool:
        """Stores data under key; False when the key is already stored or
        being stored by another writer (it wins: skip), or on NO_SPACE.
        parent (the 64-bit hash of the block this one continues) and tokens
        (its token count) go to the box's BlockStored event for a KV-aware
        router; the box does not interpret them."""
        return self.batched_put([key], [data], None if parent is None else [parent], [tokens] if tokens else None)[0]

    def batched_put(self, keys: Sequence[Key], datas: Sequence, parents: Optional[Sequence[Optional[int]]] = None,
                    tokens: Optional[Sequence[int]] = None) -> List[bool]:
        if len(keys) != len(datas):
            raise ValueError("cxlpool kv: %d keys, %d values" % (len(keys), len(datas)))
        for name, v in (("parents", parents), ("tokens", tokens)):
            if v is not None and len(v) != len(keys):
                raise ValueError("cxlpool kv: %d keys, %d %s" % (len(keys), len(v), name))
        views = [memoryview(d).cast("B") for d in datas]
        if parents is None and tokens is None:
            puts = [(k, len(v)) for k, v in zip(keys, views)]
        else:
            puts = [(k, len(v), None if parents is None else parents[i], 0 if tokens is None else tokens[i])
                    for i, (k, v) in enumerate(zip(keys, views))]
        items = self.reserve(puts)
        ok = [False] * len(keys)
        todo = []
        try:
            for i, it in enumerate(items):
                if it.status == wire.OK:
                    self.write(it.loc, views[i])
                    todo.append(i)
        except Exception:
            # Give back what was reserved: nothing half-written stays.
            self.abort([it.loc.block for it in items if it.status == wire.OK])
            raise
        for i, st in zip(todo, self.commit([items[i].loc.block for i in todo])):
            ok[i] = st == wire.OK
            if ok[i]:
                self._remember(_key(keys[i]), items[i].loc)
        return ok

    def get(self, key: Key, into=None) -> Optional[memoryview]:
        """The block's bytes, or None when the key is not stored (or was
        evicted while it was read)."""
        return self.batched_get([key], [into] if into is not None else None)[0]

    def _remember(self, key: bytes, loc: wire.Loc):
        if self._loc_max:
            with self._loc_lock:
                self._locs[key] = loc
                self._locs.move_to_end(key)
                while len(self._locs) > self._loc_max:
                    self._locs.popitem(last=False)

    def _forget(self, key: bytes):
        with self._loc_lock:
            self._locs.pop(key, None)

    def batched_get(self, keys: Sequence[Key], intos: Optional[Sequence] = None, retries: int = 2) -> List[Optional[memoryview]]:
        bkeys = [_key(k) for k in keys]
        out: List[Optional[memoryview]] = [None] * len(keys)
        with self._loc_lock:
            cached = {i: self._locs[k] for i, k in enumerate(bkeys) if k in self._locs}
        pending = [i for i in range(len(keys)) if i not in cached]
        for attempt in range(retries + 1):
            read, locs = [], []
            if attempt == 0:
                for i, loc in cached.items():
                    out[i] = self.read(loc, intos[i] if intos is not None else None)
                    read.append(i)
                    locs.append(loc)
            if pending:
                items = self.locate([bkeys[i] for i in pending])
                for i, it in zip(pending, items):
                    if it.status == wire.OK:
                        out[i] = self.read(it.loc, intos[i] if intos is not None else None)
                        read.append(i)
                        locs.append(it.loc)
            if not locs:
                break
            # Unpinned reads are valid only if the generation still holds.
            stale = []
            for i, loc, good in zip(read, locs, self.check(locs)):
                if good:
                    self._remember(bkeys[i], loc)
                else:
                    out[i] = None
                    self._forget(bkeys[i])
                    stale.append(i)
            pending = stale
            if not pending:
                break
        return out

    def pin(self, key: Key) -> bool:
        """Keeps the block from eviction (under the session's lease) until
        unpin; False when the key is not stored."""
        it = self.locate([key], pin=True)[0]
        if it.status != wire.OK:
            return False
        self._pins.setdefault(_key(key), []).append(it.loc.block)
        return True

    def unpin(self, key: Key) -> bool:
        blocks = self._pins.get(_key(key))
        if not blocks:
            return False
        b = blocks.pop()
        if not blocks:
            del self._pins[_key(key)]
        return self.unpin_blocks([b])[0] == wire.OK

    def remove(self, key: Key) -> bool:
        self._forget(_key(key))
        return self.delete([key])[0]

    # -- SGLang HiCache-shaped --

    def set(self, key: Key, value=None, target_location=None, target_sizes=None) -> bool:
        """HiCache set: stores value (or the buffer at target_location).
        A key already stored counts as success, as HiCache expects."""
        return self.batch_set([key], [value if value is not None else target_location])

    def batch_set(self, keys: Sequence[Key], values=None, target_locations=None, target_sizes=None) -> bool:
        vals = values if values is not None else target_locations
        present = self.exists_many(keys)
        todo = [i for i, p in enumerate(present) if not p]
        if not todo:
            return True
        ok = self.batched_put([keys[i] for i in todo], [vals[i] for i in todo])
        # EXISTS from a racing writer is success too: the key is stored.
        return all(ok) or all(self.exists_many([keys[i] for i, good in zip(todo, ok) if not good]))

    def batch_get(self, keys: Sequence[Key], target_locations=None, target_sizes=None) -> List[Optional[memoryview]]:
        return self.batched_get(keys, target_locations)

    def exists(self, key: Key) -> bool:
        return self.exists_many([key])[0]

    def batch_exists(self, keys: Sequence[Key]) -> int:
        """HiCache batch_exists: how many leading keys are stored."""
        n = 0
        for p in self.exists_many(keys):
            if not p:
                break
            n += 1
        return n
