"""Hostile safetensors files (issue 38 item 21): every one is a one-line `FormatError` naming the
file and expected vs actual, never a traceback of another type; files laid out as the reference
implementation requires (tensors tiling the data exactly, in any order of offsets) still load."""

import json

import numpy as np
import pytest

import birdjepa.models
import birdjepa.models.bird_mae as bird_mae
import birdjepa.models.safetensors


def write(path, header, data: bytes = b"") -> None:
    """A safetensors file from a header (a dict, or raw JSON bytes) and its data bytes."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def fault(path) -> str:
    """The one-line FormatError message of loading `path`, without the file name."""
    with pytest.raises(birdjepa.models.safetensors.FormatError) as e:
        birdjepa.models.safetensors.load(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    return msg.removeprefix(f"{path}: ")


def f32(shape, offsets) -> dict:
    return {"dtype": "F32", "shape": shape, "data_offsets": offsets}


@pytest.mark.parametrize("shape, offsets, data", [
    ([2**64], [0, 8], b"\0" * 8),  # was OverflowError in np.prod
    ([2**40] * 3, [0, 0], b""),  # np.prod wrapped to 0 bytes: accepted, then a reshape error
    ([0, 2**62, 2**62], [0, 0], b""),  # empty, but no numpy array has those dimensions
])
def test_a_shape_beyond_int64_is_refused(tmp_path, shape, offsets, data):
    path = tmp_path / "big.safetensors"
    write(path, {"w": f32(shape, offsets)}, data)
    span = 4 * int(np.prod([max(d, 1) for d in shape], dtype=object))
    assert fault(path) == (f"tensor 'w': shape {shape}: expected at most {2**63 - 1} bytes of "
                           f"F32 (numpy's limit, zero dimensions aside), got {span}")


def test_more_dimensions_than_numpy_allows_are_refused(tmp_path):
    path = tmp_path / "dims.safetensors"
    write(path, {"w": f32([1] * 65, [0, 4])}, b"\0" * 4)
    assert fault(path) == "tensor 'w': shape: expected at most 32 dimensions, got 65"


@pytest.mark.parametrize("entry, message", [
    (f32([-2], [0, 8]), "shape: expected a list of ints >= 0, got [-2]"),
    (f32([2.0], [0, 8]), "shape: expected a list of ints >= 0, got [2.0]"),
    (f32([True, 2], [0, 8]), "shape: expected a list of ints >= 0, got [True, 2]"),
    (f32([2], [-8, 0]), "data_offsets: expected [begin, end], got [-8, 0]"),
    (f32([2], [0, 8.0]), "data_offsets: expected [begin, end], got [0, 8.0]"),
    (f32([2], [False, 8]), "data_offsets: expected [begin, end], got [False, 8]"),
    ({"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]},
     "dtype ['F32'] not one of " + str(sorted(birdjepa.models.safetensors.DTYPES))),
])
def test_bad_numbers_and_types_in_an_entry_are_refused(tmp_path, entry, message):
    path = tmp_path / "bad.safetensors"
    write(path, {"w": entry}, b"\0" * 8)
    assert fault(path) == f"tensor 'w': {message}"


def test_an_integer_of_thousands_of_digits_is_refused(tmp_path):
    path = tmp_path / "digits.safetensors"
    write(path, b'{"w": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 8]}}',
          b"\0" * 8)
    assert fault(path).startswith("header is not JSON (Exceeds the limit (4300 digits)")


def test_a_deeply_nested_header_is_refused(tmp_path):
    path = tmp_path / "nested.safetensors"
    write(path, b"[" * 100_000)
    assert fault(path) == ("header: expected a JSON object of tensors, got JSON nested deeper "
                           "than Python's recursion limit")


def test_overlapping_tensors_are_refused(tmp_path):
    path = tmp_path / "overlap.safetensors"
    write(path, {"a": f32([2], [0, 8]), "b": f32([2], [4, 12])}, b"\0" * 12)
    assert fault(path) == ("tensor 'b': data_offsets [4, 12] overlaps tensor 'a' [0, 8]: "
                           "expected it to begin at 8 where tensor 'a' [0, 8] ends, got 4")
    write(path, {"a": f32([2], [0, 8]), "b": f32([2], [0, 8])}, b"\0" * 8)  # aliases
    assert fault(path) == ("tensor 'b': data_offsets [0, 8] overlaps tensor 'a' [0, 8]: "
                           "expected it to begin at 8 where tensor 'a' [0, 8] ends, got 0")


def test_gaps_and_trailing_bytes_are_refused(tmp_path):
    path = tmp_path / "gap.safetensors"
    write(path, {"a": f32([2], [0, 8]), "b": f32([2], [12, 20])}, b"\0" * 20)
    assert fault(path) == ("tensor 'b': data_offsets [12, 20] leaves bytes [8, 12) unused: "
                           "expected it to begin at 8 where tensor 'a' [0, 8] ends, got 12")
    write(path, {"a": f32([2], [4, 12])}, b"\0" * 12)
    assert fault(path) == ("tensor 'a': data_offsets [4, 12] leaves bytes [0, 4) unused: "
                           "expected it to begin at 0 (the first tensor), got 4")
    write(path, {"a": f32([2], [0, 8])}, b"\0" * 11)
    assert fault(path) == ("expected the tensors to end at the end of the file's 11 data "
                           "bytes, got 3 trailing bytes after tensor 'a' [0, 8]")
    write(path, {}, b"\0" * 4)
    assert fault(path) == ("expected the tensors to end at the end of the file's 4 data bytes, "
                           "got 4 trailing bytes after the header (no tensors)")


def test_tensors_in_any_order_of_offsets_load(tmp_path):
    """Names and offsets in different orders, and empty tensors between, as other writers do."""
    path = tmp_path / "order.safetensors"
    data = np.arange(5, dtype=np.float32).tobytes()
    write(path, {"__metadata__": {"format": "pt"}, "a": f32([3], [8, 20]),
                 "z": f32([0, 7], [8, 8]), "b": f32([2], [0, 8])}, data)
    arrays, meta = birdjepa.models.safetensors.load(path)
    assert meta == {"format": "pt"} and arrays["z"].shape == (0, 7)
    assert arrays["a"].tolist() == [2, 3, 4] and arrays["b"].tolist() == [0, 1]
    birdjepa.models.safetensors.save({"x": np.zeros((0,), np.float32)}, tmp_path / "empty.safetensors")
    assert birdjepa.models.safetensors.load(tmp_path / "empty.safetensors")[0]["x"].shape == (0,)


def test_a_header_over_the_limit_names_the_limit(tmp_path):
    path = tmp_path / "huge.safetensors"
    n = 101 * 2**20
    with open(path, "wb") as f:  # big enough to hold the header: sparse where it can be
        f.write(n.to_bytes(8, "little"))
        f.truncate(8 + n + 16)
    assert fault(path) == f"header length: expected at most {100 * 2**20} bytes (the 100 MiB " \
                          f"limit), got {n}"


def test_a_directory_is_refused_as_a_directory(tmp_path):
    d = tmp_path / "weights.safetensors"
    d.mkdir()
    assert fault(d) == "expected a .safetensors file, got a directory"
    with pytest.raises(birdjepa.models.safetensors.FormatError) as e:
        birdjepa.models.load("bird-mae-base", weights=d)
    assert str(e.value) == f"{d}: expected a .safetensors file, got a directory"
    with pytest.raises(birdjepa.models.safetensors.FormatError, match="got a directory"):
        bird_mae.read_state_dict(d)
