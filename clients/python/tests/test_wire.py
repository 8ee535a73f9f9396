"""Codec tests: the Go codec's golden frames (kv/wire/testdata/*.hex),
PROTOCOL.md's HELLO example, round trips and refusals."""

import os
import struct
import unittest

from cxlpool_kv import wire

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.environ.get("CXLPOOL_KV_GOLDEN") or os.path.join(HERE, "..", "..", "..", "kv", "wire", "testdata")


def token():
    return bytes(range(32))


def tag(b):
    return bytes((b + i) & 0xFF for i in range(16))


LOC = wire.Loc(block=7, gen=42, tag=tag(0xA0), offset=0x10000, length=256 << 10)

# The same values as kv/wire/golden_test.go.
REQUESTS = {
    "hello": wire.Request(op=wire.HELLO, id=1, namespace="llama", host=3, token=token()),
    "put": wire.Request(op=wire.PUT, id=2, puts=[(b"k1", 4096), (b"\x00\xff", 2 << 20)]),
    "put-meta": wire.Request(op=wire.PUT, id=13, flags=wire.FLAG_META,
                             puts=[(bytes(7) + b"\x29", 4096, None, 256), (bytes(7) + b"\x2a", 8192, 41, 256)]),
    "commit": wire.Request(op=wire.COMMIT, id=3, blocks=[7, 8]),
    "abort": wire.Request(op=wire.ABORT, id=4, blocks=[9]),
    "get": wire.Request(op=wire.GET, id=5, flags=wire.FLAG_PIN, keys=[b"k1"]),
    "exists": wire.Request(op=wire.EXISTS, id=6, keys=[b"k1", b"k2"]),
    "delete": wire.Request(op=wire.DELETE, id=7, keys=[b"k1"]),
    "unpin": wire.Request(op=wire.UNPIN, id=8, blocks=[7]),
    "check": wire.Request(op=wire.CHECK, id=9, checks=[(7, 42)]),
    "renew": wire.Request(op=wire.RENEW, id=10),
    "chunks": wire.Request(op=wire.CHUNKS, id=11),
    "stat": wire.Request(op=wire.STAT, id=12),
}

CHUNK5 = wire.Chunk(id=5, tag=tag(0xA0), size=256 << 20)
RESPONSES = {
    "hello": wire.Response(op=wire.HELLO, id=1, session=99, lease_ms=30000, max_body=wire.DEFAULT_MAX_BODY,
                           max_batch=4096, max_key=1024, chunks=[CHUNK5]),
    "denied": wire.Response(op=wire.HELLO, id=1, status=wire.DENIED, message="kv: namespace, host or token refused"),
    "put": wire.Response(op=wire.PUT, id=2, items=[wire.Item(wire.OK, LOC), wire.Item(wire.EXISTS_STATUS)]),
    "commit": wire.Response(op=wire.COMMIT, id=3, items=[wire.Item(wire.OK), wire.Item(wire.EXPIRED)]),
    "get": wire.Response(op=wire.GET, id=5, items=[wire.Item(wire.OK, LOC), wire.Item(wire.NOT_FOUND)]),
    "check": wire.Response(op=wire.CHECK, id=9, items=[wire.Item(wire.STALE)]),
    "renew": wire.Response(op=wire.RENEW, id=10, lease_ms=30000),
    "chunks": wire.Response(op=wire.CHUNKS, id=11, chunks=[CHUNK5, wire.Chunk(id=6, tag=tag(0xB0), size=256 << 20)]),
    "stat": wire.Response(op=wire.STAT, id=12, stat=wire.Stat(1, 2, 3, 4, 5, 6)),
}


def read_hex(name):
    with open(os.path.join(GOLDEN, name + ".hex")) as f:
        return bytes.fromhex("".join(f.read().split()))


class GoldenFrames(unittest.TestCase):
    """Byte-exact agreement with the Go codec, from its golden files."""

    def setUp(self):
        if not os.path.isdir(GOLDEN):
            self.skipTest("Go codec's golden frames not found at %s (kv/wire is not in this tree; set CXLPOOL_KV_GOLDEN)" % GOLDEN)

    def test_requests(self):
        for name, req in REQUESTS.items():
            with self.subTest(name):
                want = read_hex("req-" + name)
                self.assertEqual(wire.encode_request(req).hex(), want.hex())
                self.assertEqual(wire.decode_request(want), req)

    def test_responses(self):
        for name, resp in RESPONSES.items():
            with self.subTest(name):
                want = read_hex("resp-" + name)
                self.assertEqual(wire.decode_response(want), resp)
                self.assertEqual(wire.encode_response(resp).hex(), want.hex())

    def test_every_golden_file_is_covered(self):
        names = {f[:-4] for f in os.listdir(GOLDEN) if f.endswith(".hex")}
        covered = {"req-" + n for n in REQUESTS} | {"resp-" + n for n in RESPONSES}
        self.assertEqual(sorted(names - covered), [], "golden frames without a Python case")


class Codec(unittest.TestCase):
    def test_protocol_example(self):
        # PROTOCOL.md's HELLO: namespace llama, host 3, token 00…1f, id 1.
        want = bytes([0x34, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 5]) + b"llama" + bytes([3, 0]) + token() + bytes(4)
        self.assertEqual(wire.encode_request(REQUESTS["hello"]), want)

    def test_round_trips(self):
        for name, req in REQUESTS.items():
            with self.subTest("req-" + name):
                self.assertEqual(wire.decode_request(wire.encode_request(req)), req)
        for name, resp in RESPONSES.items():
            with self.subTest("resp-" + name):
                self.assertEqual(wire.decode_response(wire.encode_response(resp)), resp)

    def test_tag_uuid(self):
        self.assertEqual(LOC.tag_uuid, "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf")

    def test_refusals(self):
        renew = wire.encode_request(REQUESTS["renew"])
        cases = {
            "length under header": b"\x07" + renew[1:],
            "version": renew[:4] + b"\x02" + renew[5:],
            "unknown op": renew[:5] + b"\x7f" + renew[6:],
            "frame shorter than its length": wire.encode_request(REQUESTS["commit"])[:-1],
            "trailing bytes": struct.pack("<IBBHI", 9, 1, wire.RENEW, 0, 1) + b"\x00",
            "lying count": struct.pack("<IBBHI", 18, 1, wire.COMMIT, 0, 1) + b"\xff\xff" + bytes(8),
            "short key": struct.pack("<IBBHI", 13, 1, wire.GET, 0, 1) + b"\x01\x00\x05\x00a",
            "not utf-8": struct.pack("<IBBHI", 48, 1, wire.HELLO, 0, 1) + b"\x01\xff" + bytes(38),
            "put meta missing": struct.pack("<IBBHI", 21, 1, wire.PUT, wire.FLAG_META, 1) + b"\x01\x00\x01\x00k" + bytes(8),
            "put meta unknown bit": struct.pack("<IBBHI", 34, 1, wire.PUT, wire.FLAG_META, 1) + b"\x01\x00\x01\x00k" + bytes(8)
            + struct.pack("<BQI", 2, 0, 1),
            "put parent without its bit": struct.pack("<IBBHI", 34, 1, wire.PUT, wire.FLAG_META, 1) + b"\x01\x00\x01\x00k" + bytes(8)
            + struct.pack("<BQI", 0, 9, 1),
        }
        for name, frame in cases.items():
            with self.subTest(name):
                with self.assertRaises(wire.ProtocolError):
                    wire.decode_request(frame)
        with self.assertRaises(wire.ProtocolError):
            wire.decode_response(renew)  # a request is not a response

    def test_mangled_frames_raise_protocol_error_only(self):
        # Every truncation and many random byte flips of every frame either
        # decode or raise ProtocolError: never another exception.
        import random
        rnd = random.Random(15)
        frames = [(wire.decode_request, wire.encode_request(r)) for r in REQUESTS.values()]
        frames += [(wire.decode_response, wire.encode_response(r)) for r in RESPONSES.values()]
        for decode, f in frames:
            variants = [f[:n] for n in range(len(f))]
            for _ in range(200):
                b = bytearray(f)
                for _ in range(rnd.randint(1, 3)):
                    b[rnd.randrange(len(b))] = rnd.randrange(256)
                variants.append(bytes(b))
            for v in variants:
                try:
                    decode(v)
                except wire.ProtocolError:
                    pass

    def test_encode_refusals(self):
        for name, req in {
            "empty key": wire.Request(op=wire.GET, keys=[b""]),
            "key over 1024": wire.Request(op=wire.EXISTS, keys=[b"x" * 1025]),
            "short token": wire.Request(op=wire.HELLO, namespace="n", token=b"t"),
            "unknown op": wire.Request(op=0x7F),
        }.items():
            with self.subTest(name):
                with self.assertRaises(wire.ProtocolError):
                    wire.encode_request(req)


if __name__ == "__main__":
    unittest.main()
