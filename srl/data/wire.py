"""The wire format: a small JSON header plus raw array buffers, never pickle.

A message is `meta` (a small JSON-able dict) and optionally a NamedArray. On a socket it
travels as frames::

    [b"SRL1" + header JSON] [buffer 0] ... [buffer n-1] [HMAC-SHA256 tag]

The header names each buffer's path, dtype and shape. The tag covers every frame
(length-prefixed, so frame boundaries cannot be shifted) under the run's secret; it is
checked before the header is parsed. HMAC-SHA256 was measured against CurveZMQ on 100 KB
messages (benchmarks/wire_auth.py): see docs/design.md for the figures and the choice.

A stream's messages go through a `Seal` on the sending side and a `Guard` on the
receiving side, which add a stamp frame under the tag::

    [header] [buffer 0] ... [buffer n-1] [sender id, sequence number, binding] [tag]

The binding names the stream (kind, key, address, direction); the sender id is random per
sender, and its sequence number rises by one per message. The guard checks, cheapest first:
the message's size and frame count (before any hashing), the tag, the binding, and that
the sequence number is above the last one seen from that sender, so a captured message
cannot be played again, nor to another stream.

In shared memory the same header and buffers are laid out in one region (`pack_into` /
`unpack_from`); shared memory is private to the run's user, so it carries no tag.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import secrets
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from srl.data.named_array import NamedArray

MAGIC = b"SRL1"
TAG_BYTES = 32
ALIGN = 64
MAX_HEADER_BYTES = 1 << 20
MAX_FIELDS = 4096
MAX_DIMS = 16

#: The only dtypes a receiver accepts. Object dtypes (which would need pickle) never are.
DTYPES = {
    np.dtype(t).str: np.dtype(t)
    for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64")
}
_PATH_RE = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*$")


#: Why a message was rejected: the counters links keep.
OVERSIZED, BAD_TAG, GARBAGE, WRONG_STREAM, REPLAYED = "oversized", "bad_tag", "garbage", "wrong_stream", "replayed"


class WireError(ValueError):
    """A message that is malformed, truncated or fails authentication; `reason` says which."""

    def __init__(self, message: str, reason: str = GARBAGE) -> None:
        super().__init__(message)
        self.reason = reason


Message = tuple[dict[str, Any], NamedArray | None]


def _header(meta: dict[str, Any], arrays: NamedArray | None) -> tuple[bytes, list[np.ndarray]]:
    # reshape: np.ascontiguousarray turns a 0-d array into shape (1,).
    leaves = [] if arrays is None else [(p, np.ascontiguousarray(a).reshape(np.shape(a))) for p, a in arrays.items_flat()]
    fields = [[p, a.dtype.str, list(a.shape)] for p, a in leaves]
    header = MAGIC + json.dumps({"meta": meta, "fields": fields}, separators=(",", ":")).encode()
    return header, [a for _, a in leaves]


def sign(secret: bytes, frames: Sequence[Any]) -> bytes:
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for frame in frames:
        view = memoryview(frame).cast("B")
        mac.update(struct.pack("<Q", view.nbytes))
        mac.update(view)
    return mac.digest()


def encode(meta: dict[str, Any], arrays: NamedArray | None = None, secret: bytes | None = None) -> list[Any]:
    """Frames for a socket; array frames are the arrays' own memory (zero-copy)."""
    header, buffers = _header(meta, arrays)
    frames: list[Any] = [header, *(memoryview(b).cast("B") if b.nbytes else b"" for b in buffers)]
    if secret is not None:
        frames.append(sign(secret, frames))
    return frames


def _parse_header(raw: bytes | memoryview) -> tuple[dict[str, Any], list[tuple[str, np.dtype, tuple[int, ...]]]]:
    raw = bytes(raw)
    if len(raw) > MAX_HEADER_BYTES or not raw.startswith(MAGIC):
        raise WireError("bad magic or oversized header")
    try:
        header = json.loads(raw[len(MAGIC):])
    except (ValueError, RecursionError) as exc:  # bad JSON or encoding, too-long ints, too-deep nesting
        raise WireError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("meta"), dict) or not isinstance(header.get("fields"), list):
        raise WireError("header must hold a 'meta' object and a 'fields' list")
    if len(header["fields"]) > MAX_FIELDS:
        raise WireError("too many fields")
    fields = []
    leaves: set[str] = set()
    inner: set[str] = set()  # paths above a leaf
    for entry in header["fields"]:
        if not (isinstance(entry, list) and len(entry) == 3):
            raise WireError(f"bad field entry {entry!r:.80}")
        path, dtype, shape = entry
        if not isinstance(path, str) or not _PATH_RE.match(path):
            raise WireError(f"bad field path {path!r:.80}")
        above = _above(path)
        if path in leaves or path in inner or not leaves.isdisjoint(above):
            raise WireError(f"field path {path!r:.80} repeats or nests inside another field")
        leaves.add(path)
        inner.update(above)
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise WireError(f"field {path}: dtype {dtype!r:.20} not allowed")
        if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(type(d) is int and 0 <= d < 2**40 for d in shape)):
            raise WireError(f"field {path}: bad shape {shape!r:.80}")
        fields.append((path, DTYPES[dtype], tuple(shape)))
    return header["meta"], fields


def _above(path: str) -> list[str]:
    """The paths above `path`: a/b/c -> a, a/b."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _expected_nbytes(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * dtype.itemsize  # Python ints: np.prod would wrap around


def decode(frames: Sequence[Any], secret: bytes | None = None) -> Message:
    """Check the tag (when a secret is given), validate the header, and view the buffers.

    Arrays are read-only views of the received frames (no copy). Raises WireError.
    """
    views = _views(frames)
    if secret is not None:
        _check_tag(secret, views, 2)
        views = views[:-1]
    return _open(views)


def _views(frames: Sequence[Any]) -> list[memoryview]:
    return [memoryview(f.buffer if hasattr(f, "buffer") else f).cast("B") for f in frames]


def _check_tag(secret: bytes, views: list[memoryview], least: int) -> None:
    if len(views) < least or views[-1].nbytes != TAG_BYTES:
        raise WireError("missing authentication tag", BAD_TAG)
    if not hmac.compare_digest(sign(secret, views[:-1]), bytes(views[-1])):
        raise WireError("authentication failed", BAD_TAG)


def _open(views: list[memoryview]) -> Message:
    """Validate the header and view the buffers (the tag, if any, already checked and removed)."""
    if not views:
        raise WireError("empty message")
    meta, fields = _parse_header(views[0])
    if len(fields) != len(views) - 1:
        raise WireError(f"header names {len(fields)} buffers, message has {len(views) - 1}")
    if not fields:
        return meta, None
    pairs = []
    for (path, dtype, shape), view in zip(fields, views[1:]):
        if view.nbytes != _expected_nbytes(dtype, shape):
            raise WireError(f"field {path}: {view.nbytes} bytes, expected {_expected_nbytes(dtype, shape)}")
        pairs.append((path, np.frombuffer(view, dtype=dtype).reshape(shape)))
    return meta, NamedArray.from_flat(pairs)


# ------------------------------------------------------------ streams: seal and guard
_STAMP = struct.Struct("<8sQ")  # sender id, sequence number; the binding follows


class Seal:
    """One sender's end of a stream: stamps each message with the stream's binding, this
    sender's id and the next sequence number, and tags it all.

    The id is random per seal, so a restarted worker is a new sender and may count from 1
    again; a receiver that saw its predecessor does not confuse the two.
    """

    def __init__(self, secret: bytes, binding: str) -> None:
        self.secret = secret
        self.binding = binding.encode()
        self.sender = secrets.token_bytes(8)
        self.seq = 0

    def encode(self, meta: dict[str, Any], arrays: NamedArray | None = None) -> list[Any]:
        self.seq += 1
        frames = encode(meta, arrays)
        frames.append(_STAMP.pack(self.sender, self.seq) + self.binding)
        frames.append(sign(self.secret, frames))
        return frames


class Guard:
    """A receiver's end of a stream: rejects, cheapest check first, a message that is too big
    or has too many frames (before hashing a byte), fails its tag, is bound to another
    stream, or does not advance its sender's sequence number (a replay). Raises WireError.

    Without a secret (shared memory, private to the run's user) only the size is checked.
    `repeats`: a sender may send the same message again (a parameter publisher re-sends its
    latest version for late joiners); only going back is a replay then.
    """

    def __init__(self, secret: bytes | None, binding: str, max_bytes: int, repeats: bool = False) -> None:
        self.secret = secret
        self.binding = binding.encode()
        self.max_bytes = max_bytes
        self.max_frames = MAX_FIELDS + 3  # header, buffers, stamp, tag
        self.repeats = repeats
        #: The last sequence number seen from each sender: only senders that passed the tag
        #: get an entry (one per worker incarnation that talked to us), so it stays small.
        self.last: dict[bytes, int] = {}

    def decode(self, frames: Sequence[Any]) -> Message:
        if len(frames) > self.max_frames:
            raise WireError(f"{len(frames)} frames", OVERSIZED)
        views = _views(frames)
        size = sum(v.nbytes for v in views)
        if size > self.max_bytes:
            raise WireError(f"{size} bytes, more than the stream's {self.max_bytes}", OVERSIZED)
        if self.secret is None:
            return _open(views)
        _check_tag(self.secret, views, 3)
        stamp = views[-2]
        if stamp.nbytes < _STAMP.size or stamp[_STAMP.size:] != self.binding:
            raise WireError(f"message for another stream ({bytes(stamp[_STAMP.size:])!r:.120})", WRONG_STREAM)
        sender, seq = _STAMP.unpack_from(stamp)
        last = self.last.get(sender, 0)
        if seq < last or (seq == last and not self.repeats):
            raise WireError(f"sequence number {seq} after {last}: replayed", REPLAYED)
        self.last[sender] = seq
        return _open(views[:-2])


# ----------------------------------------------------------------------- frames over TCP
#: The largest frame a TCP server reads (its ZeroMQ MAXMSGSIZE): libzmq reads a whole frame before
#: anyone sees it, even in a handshake, so this bounds what a peer without the run's keys makes a
#: server hold per connection. Longer frames travel as consecutive slices (`split`, `join`).
FRAME_BYTES = 256 << 10
#: ... and that plus what CurveZMQ's encryption adds to a frame (a command name, a nonce, a MAC).
FRAME_BYTES_ENCRYPTED = FRAME_BYTES + 1024
CHUNKED = b"SRLc"


def split(frames: Sequence[Any]) -> list[Any]:
    """`frames` with none longer than `FRAME_BYTES`: if one is, an index frame (the number of
    slices of each) goes first and each long frame goes as slices of it (views, not copies)."""
    views = [memoryview(f).cast("B") for f in frames]
    if all(v.nbytes <= FRAME_BYTES for v in views):
        return list(frames)
    counts = [max(1, -(-v.nbytes // FRAME_BYTES)) for v in views]
    out: list[Any] = [CHUNKED + struct.pack(f"<{len(counts)}I", *counts)]
    for view, count in zip(views, counts):
        out.extend(view[i * FRAME_BYTES:(i + 1) * FRAME_BYTES] for i in range(count))
    return out


def join(frames: Sequence[Any], max_bytes: int, max_frames: int = MAX_FIELDS + 3) -> list[Any]:
    """The frames `split` made, whole again (a message that was not split comes back as it is)."""
    if not frames or bytes(memoryview(frames[0])[:len(CHUNKED)]) != CHUNKED:
        return list(frames)
    index = memoryview(frames[0])[len(CHUNKED):]
    if index.nbytes % 4 or not 0 < index.nbytes // 4 <= max_frames:
        raise WireError("bad slice index")
    counts = struct.unpack(f"<{index.nbytes // 4}I", index)
    if 0 in counts or sum(counts) != len(frames) - 1:
        raise WireError(f"a slice index for {sum(counts)} slices on {len(frames) - 1}")
    size = sum(memoryview(f).nbytes for f in frames[1:])
    if size > max_bytes:
        raise WireError(f"{size} bytes, more than the stream's {max_bytes}", OVERSIZED)
    whole, at = [], 1
    for count in counts:
        whole.append(frames[at] if count == 1 else b"".join(memoryview(f) for f in frames[at:at + count]))
        at += count
    return whole


# ----------------------------------------------------------------------- one region
_REGION_HEAD = struct.Struct("<II")  # header length, number of buffers


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Packed:
    """A message encoded once (header and buffer list), ready to lay out in a region."""

    def __init__(self, meta: dict[str, Any], arrays: NamedArray | None) -> None:
        self.header, self.buffers = _header(meta, arrays)
        self.size = _aligned(_REGION_HEAD.size + len(self.header)) + sum(_aligned(b.nbytes) for b in self.buffers)

    def write(self, region: memoryview) -> int:
        """Lay the message out in `region`; returns the bytes used. Raises WireError if it does not fit."""
        if self.size > region.nbytes:
            raise WireError(f"message of {self.size} bytes does not fit a {region.nbytes}-byte slot")
        _REGION_HEAD.pack_into(region, 0, len(self.header), len(self.buffers))
        region[_REGION_HEAD.size:_REGION_HEAD.size + len(self.header)] = self.header
        offset = _aligned(_REGION_HEAD.size + len(self.header))
        for buf in self.buffers:
            n = buf.nbytes
            if n:
                np.frombuffer(region, np.uint8, n, offset)[:] = buf.reshape(-1).view(np.uint8)
            offset += _aligned(n)
        return self.size


def packed_size(meta: dict[str, Any], arrays: NamedArray | None) -> int:
    return Packed(meta, arrays).size


def pack_into(region: memoryview, meta: dict[str, Any], arrays: NamedArray | None) -> int:
    """Lay a message out in `region`; returns the bytes used. Raises WireError if it does not fit."""
    return Packed(meta, arrays).write(region)


def unpack_from(region: memoryview) -> Message:
    """Views into `region` of a message laid out by `pack_into` (valid while the region is)."""
    if region.nbytes < _REGION_HEAD.size:
        raise WireError("region too small")
    header_len, count = _REGION_HEAD.unpack_from(region, 0)
    if _REGION_HEAD.size + header_len > region.nbytes:
        raise WireError("header runs past the region")
    meta, fields = _parse_header(region[_REGION_HEAD.size:_REGION_HEAD.size + header_len])
    if len(fields) != count:
        raise WireError("buffer count does not match the header")
    offset = _aligned(_REGION_HEAD.size + header_len)
    pairs = []
    for path, dtype, shape in fields:
        n = _expected_nbytes(dtype, shape)
        if offset + n > region.nbytes:
            raise WireError(f"field {path} runs past the region")
        pairs.append((path, np.frombuffer(region, np.uint8, n, offset).view(dtype).reshape(shape)))
        offset += _aligned(n)
    return meta, (NamedArray.from_flat(pairs) if pairs else None)
