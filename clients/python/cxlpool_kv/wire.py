"""Codec of the cxlpool KV index protocol, version 1 (kv/wire/PROTOCOL.md).

Standard library only. Frames are ``u32 length | u8 version | u8 op |
u16 flags | u32 id | body``, little-endian; a response's op is the
request's op | 0x80 and its body starts with ``u16 status``. The encoders
and decoders here are byte-exact with the Go codec (kv/wire): the unit
tests compare them with the Go codec's golden frames.

Both directions are implemented for both sides, so that tests can run a
fake index in-process; a client needs only ``encode_request`` and
``decode_response``.
"""

import struct
import uuid
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

VERSION = 1
HEADER_SIZE = 12
DEFAULT_MAX_BODY = 1 << 20
MAX_KEY = 1024
TOKEN_SIZE = 32
TAG_SIZE = 16

HELLO, PUT, COMMIT, ABORT, GET, EXISTS, DELETE, UNPIN, CHECK, RENEW, CHUNKS, STAT = range(1, 13)
OP_NAMES = {HELLO: "HELLO", PUT: "PUT", COMMIT: "COMMIT", ABORT: "ABORT", GET: "GET",
            EXISTS: "EXISTS", DELETE: "DELETE", UNPIN: "UNPIN", CHECK: "CHECK",
            RENEW: "RENEW", CHUNKS: "CHUNKS", STAT: "STAT"}
RESPONSE = 0x80
FLAG_PIN = 1
# On a PUT: each item carries its block's sequence (u8 meta, u64 parent_hash,
# u32 tokens) after its length; set by encode_request when an item has one.
FLAG_META = 1
_META_PARENT = 1

(OK, NOT_FOUND, DENIED, INVALID, NO_SPACE, EXISTS_STATUS, STALE, EXPIRED, BUSY,
 TOO_LARGE, BAD_FRAME, UNAVAILABLE, INTERNAL) = range(13)
STATUS_NAMES = ["OK", "NOT_FOUND", "DENIED", "INVALID", "NO_SPACE", "EXISTS", "STALE",
                "EXPIRED", "BUSY", "TOO_LARGE", "BAD_FRAME", "UNAVAILABLE", "INTERNAL"]

# Ops whose OK answer is one u16 status per item, nothing else.
_STATUS_ONLY = (COMMIT, ABORT, EXISTS, DELETE, UNPIN, CHECK)
# Ops whose OK answer is a status and, when 0, a loc per item.
_WITH_LOC = (PUT, GET)

_LOC = struct.Struct("<QQ16sQQ")    # block, gen, tag, offset, length
_CHUNK = struct.Struct("<Q16sQ")    # chunk id, tag, size
_HEADER = struct.Struct("<IBBHI")   # length, version, op, flags, id
_STAT = struct.Struct("<6Q")


class ProtocolError(ValueError):
    """A frame or body that breaks the protocol (names the rule)."""


def status_name(s: int) -> str:
    return STATUS_NAMES[s] if 0 <= s < len(STATUS_NAMES) else "STATUS_%d" % s


@dataclass(frozen=True)
class Loc:
    """Where a block lives: the chunk's tag, the offset inside the chunk's
    capacity (its extents end to end, as the host maps them), its length,
    and the (block, gen) pair that stays valid while the block is live."""
    block: int
    gen: int
    tag: bytes
    offset: int
    length: int

    @property
    def tag_uuid(self) -> str:
        """The tag as the box shows it: a UUID in the byte order of the bytes."""
        return str(uuid.UUID(bytes=self.tag))


@dataclass(frozen=True)
class Chunk:
    id: int
    tag: bytes
    size: int

    @property
    def tag_uuid(self) -> str:
        return str(uuid.UUID(bytes=self.tag))


@dataclass(frozen=True)
class Stat:
    blocks: int = 0
    used: int = 0
    reserved: int = 0
    capacity: int = 0
    quota: int = 0
    evictions: int = 0


@dataclass
class Item:
    status: int
    loc: Optional[Loc] = None


@dataclass
class Request:
    op: int
    id: int = 0
    flags: int = 0
    # HELLO
    namespace: str = ""
    host: int = 0
    token: bytes = bytes(TOKEN_SIZE)
    lease_ms: int = 0
    # PUT: (key, length), or (key, length, parent, tokens) with the block's
    # sequence (parent: the 64-bit hash of the block it continues, None for
    # a sequence's first; tokens: its token count, 0 not told); decoded PUTs
    # with FLAG_META are 4-tuples. GET/EXISTS/DELETE: keys;
    # COMMIT/ABORT/UNPIN: blocks; CHECK: (block, gen)
    puts: List[Tuple[bytes, int]] = field(default_factory=list)
    keys: List[bytes] = field(default_factory=list)
    blocks: List[int] = field(default_factory=list)
    checks: List[Tuple[int, int]] = field(default_factory=list)


@dataclass
class Response:
    op: int
    id: int = 0
    status: int = OK
    message: str = ""
    items: List[Item] = field(default_factory=list)
    # HELLO
    session: int = 0
    lease_ms: int = 0
    max_body: int = 0
    max_batch: int = 0
    max_key: int = 0
    chunks: List[Chunk] = field(default_factory=list)
    stat: Stat = field(default_factory=Stat)


# --- writing -----------------------------------------------------------------

def _frame(op: int, flags: int, rid: int, body: bytes) -> bytes:
    if len(body) > DEFAULT_MAX_BODY:
        raise ProtocolError("kv wire: body of %d bytes over MaxBody %d" % (len(body), DEFAULT_MAX_BODY))
    return _HEADER.pack(8 + len(body), VERSION, op, flags, rid & 0xFFFFFFFF) + body


def _key(k: bytes) -> bytes:
    if not 1 <= len(k) <= MAX_KEY:
        raise ProtocolError("kv wire: key of %d bytes, want 1…%d" % (len(k), MAX_KEY))
    return struct.pack("<H", len(k)) + k


def _str8(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 255:
        raise ProtocolError("kv wire: string of %d bytes over 255" % len(b))
    return bytes([len(b)]) + b


def _count(n: int) -> bytes:
    if n > 0xFFFF:
        raise ProtocolError("kv wire: %d items over 65535" % n)
    return struct.pack("<H", n)


def encode_request(r: Request) -> bytes:
    """The request's frame, byte for byte as kv/wire.AppendRequest."""
    op = r.op
    if op == HELLO:
        if len(r.token) != TOKEN_SIZE:
            raise ProtocolError("kv wire: token of %d bytes, want %d" % (len(r.token), TOKEN_SIZE))
        body = _str8(r.namespace) + struct.pack("<H", r.host) + bytes(r.token) + struct.pack("<I", r.lease_ms)
    elif op == PUT:
        flags = r.flags
        if any(len(p) == 4 and (p[2] is not None or p[3]) for p in r.puts):
            flags |= FLAG_META
        parts = [_count(len(r.puts))]
        for p in r.puts:
            parts.append(_key(p[0]) + struct.pack("<Q", p[1]))
            if flags & FLAG_META:
                parent, tokens = (p[2], p[3]) if len(p) == 4 else (None, 0)
                if not 0 <= tokens <= 0xFFFFFFFF or (parent is not None and not 0 <= parent < 1 << 64):
                    raise ProtocolError("kv wire: PUT item parent %r, tokens %r out of range" % (parent, tokens))
                parts.append(struct.pack("<BQI", 0 if parent is None else _META_PARENT, parent or 0, tokens))
        return _frame(op, flags, r.id, b"".join(parts))
    elif op in (GET, EXISTS, DELETE):
        body = _count(len(r.keys)) + b"".join(_key(k) for k in r.keys)
    elif op in (COMMIT, ABORT, UNPIN):
        body = _count(len(r.blocks)) + b"".join(struct.pack("<Q", b) for b in r.blocks)
    elif op == CHECK:
        body = _count(len(r.checks)) + b"".join(struct.pack("<QQ", b, g) for b, g in r.checks)
    elif op in (RENEW, CHUNKS, STAT):
        body = b""
    else:
        raise ProtocolError("kv wire: unknown op %#x" % op)
    return _frame(op, r.flags, r.id, body)


def _loc_bytes(l: Loc) -> bytes:
    return _LOC.pack(l.block, l.gen, l.tag, l.offset, l.length)


def encode_response(r: Response) -> bytes:
    """The response's frame, byte for byte as kv/wire.AppendResponse."""
    op = r.op
    body = struct.pack("<H", r.status)
    if r.status != OK:
        body += _str8(r.message)
    elif op == HELLO:
        body += struct.pack("<QIIHH", r.session, r.lease_ms, r.max_body, r.max_batch, r.max_key)
        body += _count(len(r.chunks)) + b"".join(_CHUNK.pack(c.id, c.tag, c.size) for c in r.chunks)
    elif op in _WITH_LOC:
        body += _count(len(r.items))
        for it in r.items:
            body += struct.pack("<H", it.status) + (_loc_bytes(it.loc) if it.status == OK else b"")
    elif op in _STATUS_ONLY:
        body += _count(len(r.items)) + b"".join(struct.pack("<H", it.status) for it in r.items)
    elif op == RENEW:
        body += struct.pack("<I", r.lease_ms)
    elif op == CHUNKS:
        body += _count(len(r.chunks)) + b"".join(_CHUNK.pack(c.id, c.tag, c.size) for c in r.chunks)
    elif op == STAT:
        s = r.stat
        body += _STAT.pack(s.blocks, s.used, s.reserved, s.capacity, s.quota, s.evictions)
    else:
        raise ProtocolError("kv wire: unknown op %#x" % op)
    return _frame(op | RESPONSE, 0, r.id, body)


# --- reading -----------------------------------------------------------------

class _Reader:
    def __init__(self, b: bytes):
        self.b, self.i = memoryview(b), 0

    def take(self, n: int) -> bytes:
        if self.i + n > len(self.b):
            raise ProtocolError("kv wire: body truncated: %d bytes wanted at %d of %d" % (n, self.i, len(self.b)))
        v = bytes(self.b[self.i:self.i + n])
        self.i += n
        return v

    def u16(self) -> int:
        return struct.unpack("<H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def count(self, item_size: int) -> int:
        n = self.u16()
        # A count the remaining bytes cannot hold is a lie: refuse before
        # allocating for it.
        if n * item_size > len(self.b) - self.i:
            raise ProtocolError("kv wire: count %d of %d-byte items over the %d bytes left" % (n, item_size, len(self.b) - self.i))
        return n

    def key(self) -> bytes:
        n = self.u16()
        if not 1 <= n <= MAX_KEY:
            raise ProtocolError("kv wire: key of %d bytes, want 1…%d" % (n, MAX_KEY))
        return self.take(n)

    def str8(self) -> str:
        n = self.take(1)[0]
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError("kv wire: string not UTF-8") from e

    def loc(self) -> Loc:
        return Loc(*_LOC.unpack(self.take(_LOC.size)))

    def chunks(self) -> List[Chunk]:
        return [Chunk(*_CHUNK.unpack(self.take(_CHUNK.size))) for _ in range(self.count(_CHUNK.size))]

    def end(self):
        if self.i != len(self.b):
            raise ProtocolError("kv wire: %d trailing bytes" % (len(self.b) - self.i))


def parse_header(h: bytes, max_body: int = DEFAULT_MAX_BODY) -> Tuple[int, int, int, int]:
    """(body length, op, flags, id) of a 12-byte header, checked."""
    length, version, op, flags, rid = _HEADER.unpack(h)
    if length < 8 or length > 8 + max_body:
        raise ProtocolError("kv wire: frame length %d out of 8…%d" % (length, 8 + max_body))
    if version != VERSION:
        raise ProtocolError("kv wire: version %d, want %d" % (version, VERSION))
    if (op & 0x7F) not in OP_NAMES:
        raise ProtocolError("kv wire: unknown op %#x" % op)
    return length - 8, op, flags, rid


def split_frame(frame: bytes, max_body: int = DEFAULT_MAX_BODY) -> Tuple[int, int, int, bytes]:
    """(op, flags, id, body) of one whole frame."""
    if len(frame) < HEADER_SIZE:
        raise ProtocolError("kv wire: frame of %d bytes under the %d-byte header" % (len(frame), HEADER_SIZE))
    n, op, flags, rid = parse_header(frame[:HEADER_SIZE], max_body)
    if len(frame) != HEADER_SIZE + n:
        raise ProtocolError("kv wire: frame of %d bytes, header says %d" % (len(frame), HEADER_SIZE + n))
    return op, flags, rid, frame[HEADER_SIZE:]


def decode_response(frame: bytes) -> Response:
    op, _, rid, body = split_frame(frame)
    if not op & RESPONSE:
        raise ProtocolError("kv wire: op %#x is not a response" % op)
    op &= 0x7F
    r = _Reader(body)
    resp = Response(op=op, id=rid, status=r.u16())
    if resp.status != OK:
        resp.message = r.str8()
    elif op == HELLO:
        resp.session, resp.lease_ms, resp.max_body = r.u64(), r.u32(), r.u32()
        resp.max_batch, resp.max_key = r.u16(), r.u16()
        resp.chunks = r.chunks()
    elif op in _WITH_LOC:
        for _ in range(r.count(2)):
            s = r.u16()
            resp.items.append(Item(s, r.loc() if s == OK else None))
    elif op in _STATUS_ONLY:
        resp.items = [Item(r.u16()) for _ in range(r.count(2))]
    elif op == RENEW:
        resp.lease_ms = r.u32()
    elif op == CHUNKS:
        resp.chunks = r.chunks()
    elif op == STAT:
        resp.stat = Stat(*_STAT.unpack(r.take(_STAT.size)))
    r.end()
    return resp


def decode_request(frame: bytes) -> Request:
    op, flags, rid, body = split_frame(frame)
    if op & RESPONSE:
        raise ProtocolError("kv wire: op %#x is a response" % op)
    r = _Reader(body)
    req = Request(op=op, id=rid, flags=flags)
    if op == HELLO:
        req.namespace, req.host, req.token, req.lease_ms = r.str8(), r.u16(), r.take(TOKEN_SIZE), r.u32()
    elif op == PUT:
        if flags & FLAG_META:
            req.puts = [_put_meta(r) for _ in range(r.count(11 + 13))]
        else:
            req.puts = [(r.key(), r.u64()) for _ in range(r.count(11))]
    elif op in (GET, EXISTS, DELETE):
        req.keys = [r.key() for _ in range(r.count(3))]
    elif op in (COMMIT, ABORT, UNPIN):
        req.blocks = [r.u64() for _ in range(r.count(8))]
    elif op == CHECK:
        req.checks = [(r.u64(), r.u64()) for _ in range(r.count(16))]
    r.end()
    return req


def _put_meta(r: "_Reader"):
    k, n = r.key(), r.u64()
    m = r.take(1)[0]
    parent, tokens = r.u64(), r.u32()
    if m & ~_META_PARENT:
        raise ProtocolError("kv wire: PUT item meta byte %#04x: only bit 0 (parent) is defined" % m)
    if not m & _META_PARENT:
        if parent:
            raise ProtocolError("kv wire: PUT item has parent hash %d without its parent bit" % parent)
        parent = None
    return (k, n, parent, tokens)


def read_frame(recv_exact, max_body: int = DEFAULT_MAX_BODY) -> bytes:
    """One whole frame from recv_exact(n) -> bytes (exactly n, or raises)."""
    h = recv_exact(HEADER_SIZE)
    n, _, _, _ = parse_header(h, max_body)
    return h + (recv_exact(n) if n else b"")
