"""Unit tests for srl.data.wire: round trips, and every malformed message is a WireError."""

from __future__ import annotations

import json
import secrets
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from srl.data import wire
from srl.data.named_array import NamedArray
from srl.data.wire import WireError

SECRET = secrets.token_bytes(32)
DTYPE_NAMES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64"]
SHAPES = [(), (0,), (3,), (2, 3), (0, 4), (2, 0, 3), (1, 1, 1, 5)]


def _array(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    return rng.standard_normal(shape).astype(dt)


def all_dtypes_tree() -> NamedArray:
    rng = np.random.default_rng(0)
    tree = NamedArray()
    for i, name in enumerate(DTYPE_NAMES):
        for j, shape in enumerate(SHAPES):
            tree[f"{name}/s{j}"] = _array(name, shape, rng)
        tree[f"nested/deep/{name}"] = _array(name, SHAPES[i % len(SHAPES)], rng)
    return tree


def assert_same(a: NamedArray | None, b: NamedArray | None) -> None:
    assert a is not None and b is not None
    assert a.paths() == b.paths()
    for (path, x), (_, y) in zip(a.items_flat(), b.items_flat()):
        assert x.dtype == y.dtype, path
        assert x.shape == y.shape, path
        np.testing.assert_array_equal(x, y, err_msg=path)


def header(obj) -> bytes:
    return wire.MAGIC + json.dumps(obj).encode()


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("secret", [None, SECRET], ids=["plain", "signed"])
def test_round_trip_every_dtype(secret):
    tree = all_dtypes_tree()
    meta = {"version": 7, "name": "x", "nested": {"list": [1, 2.5, None, True]}}
    frames = wire.encode(meta, tree, secret)
    assert len(frames) == 1 + len(tree.paths()) + (secret is not None)
    # what arrives on a socket is bytes: copy every frame
    got_meta, got = wire.decode([bytes(f) for f in frames], secret)
    assert got_meta == meta
    assert_same(tree, got)
    assert isinstance(got["nested"]["deep"], NamedArray)


@pytest.mark.parametrize("secret", [None, SECRET], ids=["plain", "signed"])
def test_round_trip_meta_only(secret):
    frames = wire.encode({"a": 1}, None, secret)
    assert wire.decode(frames, secret) == ({"a": 1}, None)
    frames = wire.encode({}, NamedArray(), secret)
    assert wire.decode(frames, secret) == ({}, None)


def test_round_trip_non_contiguous_and_zero_d():
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    tree = NamedArray({"t": base.T, "s": base[::2, ::3], "z": np.float32(1.5) * np.ones(()), "b": np.array(True)})
    _, got = wire.decode(wire.encode({}, tree, SECRET), SECRET)
    assert_same(tree, got)
    assert got["z"].shape == () and got["b"].shape == ()


def test_decoded_arrays_are_read_only_views():
    frames = [bytes(f) for f in wire.encode({}, NamedArray({"x": np.arange(4.0)}))]
    _, got = wire.decode(frames)
    with pytest.raises(ValueError):
        got["x"][0] = 1


def test_pack_into_unpack_from_round_trip():
    tree = all_dtypes_tree()
    meta = {"slot": 3, "s": "é"}
    size = wire.packed_size(meta, tree)
    region = memoryview(bytearray(size + 100))
    used = wire.pack_into(region, meta, tree)
    assert used == size
    got_meta, got = wire.unpack_from(region[:used])
    assert got_meta == meta
    assert_same(tree, got)
    # buffers are aligned inside the region
    base = np.frombuffer(region, np.uint8).ctypes.data
    for _, leaf in got.items_flat():
        if leaf.nbytes:
            assert (leaf.ctypes.data - base) % wire.ALIGN == 0
    # meta only
    n = wire.pack_into(region, {"k": 1}, None)
    assert wire.unpack_from(region[:n]) == ({"k": 1}, None)


def test_pack_into_too_small_region():
    tree = NamedArray({"x": np.zeros(1000)})
    region = memoryview(bytearray(wire.packed_size({}, tree) - 1))
    with pytest.raises(WireError):
        wire.pack_into(region, {}, tree)


# ------------------------------------------------------------------ rejections
def signed_frames() -> list[bytes]:
    tree = NamedArray({"obs": {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}, "a": np.array([1, 2], np.int64)})
    return [bytes(f) for f in wire.encode({"m": 1}, tree, SECRET)]


def test_flipped_bit_anywhere_is_rejected():
    frames = signed_frames()
    for i, frame in enumerate(frames):
        for byte in {0, len(frame) // 2, len(frame) - 1}:
            for bit in (0, 7):
                tampered = list(frames)
                b = bytearray(frame)
                b[byte] ^= 1 << bit
                tampered[i] = bytes(b)
                with pytest.raises(WireError):
                    wire.decode(tampered, SECRET)


def test_moved_frame_boundary_is_rejected():
    frames = signed_frames()
    # same bytes overall, boundary between frame 1 and 2 shifted
    shifted = [frames[0], frames[1][:-4], frames[1][-4:] + frames[2], *frames[3:]]
    with pytest.raises(WireError):
        wire.decode(shifted, SECRET)


def test_missing_tag_wrong_secret_and_unsigned():
    frames = signed_frames()
    with pytest.raises(WireError, match="tag|authentication"):
        wire.decode(frames[:-1], SECRET)
    with pytest.raises(WireError):
        wire.decode(frames, secrets.token_bytes(32))
    unsigned = [bytes(f) for f in wire.encode({"m": 1}, None)]
    with pytest.raises(WireError):
        wire.decode(unsigned, SECRET)  # a one-frame message has no tag
    with pytest.raises(WireError):
        wire.decode([], SECRET)
    with pytest.raises(WireError):
        wire.decode([])
    # a tag that is not 32 bytes
    with pytest.raises(WireError):
        wire.decode([*frames[:-1], frames[-1][:-1]], SECRET)


def test_truncated_buffer_is_rejected():
    frames = [bytes(f) for f in wire.encode({}, NamedArray({"x": np.arange(10, dtype=np.int32)}))]
    with pytest.raises(WireError, match="bytes"):
        wire.decode([frames[0], frames[1][:-1]])
    with pytest.raises(WireError):
        wire.decode([frames[0], frames[1] + b"\0"])
    # and under a secret, re-signed so the tag is right but the sizes are not
    bad = [frames[0], frames[1][:-4]]
    with pytest.raises(WireError):
        wire.decode([*bad, wire.sign(SECRET, bad)], SECRET)


def test_wrong_number_of_frames():
    frames = [bytes(f) for f in wire.encode({}, NamedArray({"x": np.zeros(2), "y": np.zeros(2)}))]
    with pytest.raises(WireError, match="buffers"):
        wire.decode(frames[:-1])
    with pytest.raises(WireError, match="buffers"):
        wire.decode([*frames, b""])


@pytest.mark.parametrize("raw", [
    b"SRL2{}",
    b"",
    b"{\"meta\":{},\"fields\":[]}",
    wire.MAGIC + b"not json",
    wire.MAGIC + b"\xff\xfe\x00garbage",
    wire.MAGIC + b"[]",
    wire.MAGIC + b"{\"meta\":[],\"fields\":[]}",
    wire.MAGIC + b"{\"meta\":{},\"fields\":{}}",
    wire.MAGIC + b"{\"meta\":{}}",
    wire.MAGIC + b"[" * 100_000,
    wire.MAGIC + b"{\"meta\":{\"n\":" + b"9" * 5000 + b"},\"fields\":[]}",
    wire.MAGIC + b" " * (wire.MAX_HEADER_BYTES + 1),
], ids=["magic", "empty", "no-magic", "not-json", "not-utf8", "list", "meta-list", "fields-dict", "no-fields",
        "deep", "huge-int", "oversized"])
def test_bad_header_is_rejected(raw):
    with pytest.raises(WireError):
        wire.decode([raw])
    with pytest.raises(WireError):
        wire.decode([raw, wire.sign(SECRET, [raw])], SECRET)


@pytest.mark.parametrize("fields,buffers", [
    ([["x", "|O", [1]]], [b"\0" * 8]),
    ([["x", "<U4", [1]]], [b"\0" * 16]),
    ([["x", ">f4", [1]]], [b"\0" * 4]),
    ([["x", "<c16", [1]]], [b"\0" * 16]),
    ([["x", "V8", [1]]], [b"\0" * 8]),
    ([["x", ["<f4"], [1]]], [b"\0" * 4]),
    ([["x", {"a": 1}, [1]]], [b"\0" * 4]),
    ([["x", None, [1]]], [b"\0" * 4]),
    ([["x", "<f4"]], [b"\0" * 4]),
    ([["x", "<f4", [1], 0]], [b"\0" * 4]),
    (["x"], [b"\0" * 4]),
    ([["", "<f4", [1]]], [b"\0" * 4]),
    ([["a//b", "<f4", [1]]], [b"\0" * 4]),
    ([["/a", "<f4", [1]]], [b"\0" * 4]),
    ([["a/", "<f4", [1]]], [b"\0" * 4]),
    ([["a b", "<f4", [1]]], [b"\0" * 4]),
    ([[1, "<f4", [1]]], [b"\0" * 4]),
    ([["x", "<f4", [1]], ["x", "<f4", [1]]], [b"\0" * 4] * 2),
    ([["x", "<f4", [1]], ["x/y", "<f4", [1]]], [b"\0" * 4] * 2),
    ([["x/y", "<f4", [1]], ["x", "<f4", [1]]], [b"\0" * 4] * 2),
    ([["x", "<f4", [-1]]], [b"\0" * 4]),
    ([["x", "<f4", [-2, -2]]], [b"\0" * 16]),
    ([["x", "<f4", [2**40]]], [b""]),
    ([["x", "<f4", [2**39, 2**39]]], [b""]),
    ([["x", "<f4", [2**32, 2**32, 1]]], [b""]),
    ([["x", "<f4", [2**32] * 8]], [b""]),
    ([["x", "<f4", [1] * 17]], [b"\0" * 4]),
    ([["x", "<f4", [1.0]]], [b"\0" * 4]),
    ([["x", "<f4", [True]]], [b"\0" * 4]),
    ([["x", "<f4", "1"]], [b"\0" * 4]),
    ([["x", "<f4", None]], [b"\0" * 4]),
    ([["x", "<f4", [1]]] * (wire.MAX_FIELDS + 1), [b"\0" * 4] * (wire.MAX_FIELDS + 1)),
])
def test_bad_fields_are_rejected(fields, buffers):
    raw = header({"meta": {}, "fields": fields})
    with pytest.raises(WireError):
        wire.decode([raw, *buffers])
    signed = [raw, *buffers]
    with pytest.raises(WireError):
        wire.decode([*signed, wire.sign(SECRET, signed)], SECRET)
    # the same header laid out in a region
    region = struct.pack("<II", len(raw), len(buffers)) + raw + b"\0" * 4096
    with pytest.raises(WireError):
        wire.unpack_from(memoryview(region))


def test_unpack_from_rejects_bad_regions():
    tree = NamedArray({"x": np.arange(100, dtype=np.float64)})
    region = memoryview(bytearray(wire.packed_size({}, tree)))
    used = wire.pack_into(region, {}, tree)
    with pytest.raises(WireError):
        wire.unpack_from(region[:3])
    with pytest.raises(WireError):
        wire.unpack_from(region[:used - (-800 % wire.ALIGN) - 1])  # last buffer runs past the end
    with pytest.raises(WireError):
        wire.unpack_from(region[:20])  # header runs past the end
    bad = bytearray(region)
    struct.pack_into("<II", bad, 0, 2**31, 1)
    with pytest.raises(WireError):
        wire.unpack_from(memoryview(bad))
    bad = bytearray(region)
    struct.pack_into("<II", bad, 0, struct.unpack_from("<I", region, 0)[0], 2)
    with pytest.raises(WireError):
        wire.unpack_from(memoryview(bad))  # count does not match the header
    bad = bytearray(region)
    bad[8:12] = b"XXXX"  # magic
    with pytest.raises(WireError):
        wire.unpack_from(memoryview(bad))


# ------------------------------------------------------------------ properties
def _tree_strategy():
    leaf = st.builds(
        lambda name, shape, seed: _array(name, tuple(shape), np.random.default_rng(seed)),
        st.sampled_from(DTYPE_NAMES), st.lists(st.integers(0, 3), max_size=3), st.integers(0, 2**16))
    names = st.text("abcxyz_", min_size=1, max_size=4)
    return st.dictionaries(names, st.one_of(leaf, st.dictionaries(names, leaf, min_size=1, max_size=3)),
                           max_size=4).map(NamedArray)


def _mutate(data, frames: list[bytes]) -> list[bytes]:
    """Apply a few random edits: flip, truncate, extend, drop, duplicate, or replace frames."""
    frames = list(frames)
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "truncate", "extend", "drop", "dup", "replace", "swap"]))
        if not frames:
            frames.append(data.draw(st.binary(max_size=64)))
            continue
        i = data.draw(st.integers(0, len(frames) - 1))
        f = bytearray(frames[i])
        if op == "flip" and f:
            j = data.draw(st.integers(0, len(f) - 1))
            f[j] ^= 1 << data.draw(st.integers(0, 7))
            frames[i] = bytes(f)
        elif op == "truncate":
            frames[i] = bytes(f[:data.draw(st.integers(0, len(f)))])
        elif op == "extend":
            frames[i] = bytes(f) + data.draw(st.binary(min_size=1, max_size=16))
        elif op == "drop":
            del frames[i]
        elif op == "dup":
            frames.insert(i, frames[i])
        elif op == "replace":
            frames[i] = data.draw(st.binary(max_size=64))
        elif op == "swap":
            j = data.draw(st.integers(0, len(frames) - 1))
            frames[i], frames[j] = frames[j], frames[i]
    return frames


_header_text = st.one_of(
    st.binary(max_size=80),
    st.recursive(
        st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
        max_leaves=12,
    ).map(lambda obj: json.dumps(obj).encode()),
    # plausible headers: the right keys, random field entries
    st.lists(st.tuples(st.sampled_from(["x", "x/y", "y", "", "a b", 3]),
                       st.sampled_from([*wire.DTYPES, "|O", "<U2", 1, None, ["<f4"], {}]),
                       st.one_of(st.lists(st.integers(-3, 2**41), max_size=4), st.none(), st.text(max_size=2))),
             max_size=4).map(lambda fs: json.dumps({"meta": {}, "fields": [list(f) for f in fs]}).encode()),
)

PROPERTY = settings(max_examples=200, deadline=None, database=None,  # no .hypothesis/ in the checkout
                   suppress_health_check=[HealthCheck.too_slow])


def _decodes_or_wire_error(frames, secret):
    try:
        meta, arrays = wire.decode(frames, secret)
    except WireError:
        return
    assert isinstance(meta, dict)
    if arrays is not None:
        for _, leaf in arrays.items_flat():
            assert leaf.dtype in wire.DTYPES.values()


@PROPERTY
@given(tree=_tree_strategy(), data=st.data(), signed=st.booleans())
def test_property_decode_tampered_frames(tree, data, signed):
    secret = SECRET if signed else None
    frames = [bytes(f) for f in wire.encode({"k": 1}, tree, secret)]
    assert_same_or_none(tree, wire.decode(frames, secret)[1])
    tampered = _mutate(data, frames)
    _decodes_or_wire_error(tampered, secret)
    if signed and tampered != frames:
        with pytest.raises(WireError):
            wire.decode(tampered, secret)


@PROPERTY
@given(head=_header_text, buffers=st.lists(st.binary(max_size=40), max_size=4), signed=st.booleans(),
       magic=st.booleans(), resign=st.booleans())
def test_property_decode_random_frames(head, buffers, signed, magic, resign):
    frames = [(wire.MAGIC if magic else b"") + head, *buffers]
    secret = SECRET if signed else None
    if signed and resign:
        frames.append(wire.sign(SECRET, frames))  # authentic, so the header parser is reached
    _decodes_or_wire_error(frames, secret)


@PROPERTY
@given(tree=_tree_strategy(), data=st.data())
def test_property_unpack_from_tampered_region(tree, data):
    size = wire.packed_size({"k": 1}, tree)
    region = bytearray(size)
    wire.pack_into(memoryview(region), {"k": 1}, tree)
    assert_same_or_none(tree, wire.unpack_from(memoryview(region))[1])
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "truncate", "head", "random"]))
        if op == "flip" and region:
            j = data.draw(st.integers(0, len(region) - 1))
            region[j] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "truncate":
            region = region[:data.draw(st.integers(0, len(region)))]
        elif op == "head" and len(region) >= 8:
            struct.pack_into("<II", region, 0, data.draw(st.integers(0, 2**32 - 1)), data.draw(st.integers(0, 2**32 - 1)))
        elif op == "random":
            region = bytearray(data.draw(st.binary(max_size=200)))
    try:
        meta, _ = wire.unpack_from(memoryview(region))
    except WireError:
        return
    assert isinstance(meta, dict)


@PROPERTY
@given(head=_header_text, count=st.integers(0, 5), tail=st.binary(max_size=300))
def test_property_unpack_from_random_header(head, count, tail):
    raw = wire.MAGIC + head
    region = struct.pack("<II", len(raw), count) + raw + tail
    try:
        wire.unpack_from(memoryview(region))
    except WireError:
        pass


def assert_same_or_none(tree: NamedArray, got: NamedArray | None) -> None:
    if not tree.paths():
        assert got is None
    else:
        assert_same(tree, got)
