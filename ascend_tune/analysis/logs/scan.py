"""Find the guide's loss lines in a log's bytes with numpy, without a Python loop over lines.

A line is ``...(step=0000042) Train Loss: 1.2345, Train Steps/Sec: 9.87...``: whatever precedes the marker (a
timestamp, a logger prefix, nothing) and follows the rate is ignored. The regular expression
:data:`ascend_tune.formats.log_line.LINE` is the definition; the scan is a faster way to apply it when the numbers
are plain decimals:

1. every ``(`` is found with one vectorised comparison over the buffer, and the 80 bytes that follow each are
   gathered into a small matrix, a chunk of rows at a time so the matrix stays in the CPU cache;
2. a log's lines share a few *layouts* (the length of the step, where the loss's and the rate's dots are): the
   layouts are learnt from a sample of lines spread over the file, and all rows of one layout are checked and
   parsed with fixed columns: each number's digits are accumulated column by column into an int64 mantissa, and
   value = mantissa / 10**fraction_digits is one correctly rounded division, equal to Python's ``float()``;
3. a ``(step=`` row that no sampled layout fits (``nan``, ``inf``, exponents, a rare width, a broken line, a marker
   near the end of the buffer) is matched with ``LINE`` at its marker, so the result is always LINE's.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...formats.log_line import ANSI, LINE

_PLAIN = re.compile(rb"[-+]?\d*\.?\d*\Z")

_MARK = b"(step="
_MID = b") Train Loss: "
_SEP = b", Train Steps/Sec: "
_WINDOW = 72  # bytes looked at after a marker; longer lines take the slow path
_CHUNK = 1 << 14  # rows per matrix
_SAMPLE = 512
_POW10 = 10.0 ** np.arange(16)
_ENDS_NUMBER = np.ones(256, bool)  # bytes after which the regex's number cannot go on
_ENDS_NUMBER[list(b"0123456789.+-eE")] = False


class _Shape(NamedTuple):
    """How a number is written: its length, the column of its dot (-1: none) and whether it starts with a sign."""

    length: int
    dot: int
    sign: bool


class _Layout(NamedTuple):
    step: int  # digits of the step
    loss: _Shape
    rate: _Shape


def scan(raw: object) -> tuple:
    """(steps int64, losses float64, rates float64, markers) of every loss line in ``raw``, in file order;
    ``markers`` counts the ``(step=`` texts seen (a marker that does not start a loss line is a malformed line).
    ``raw``: bytes or any read-only buffer (a memory-mapped file)."""
    steps, losses, rates, markers, slow = _scan(raw)
    if slow and raw.find(b"\x1b") >= 0:  # type: ignore[attr-defined]  # colour codes inside lines: drop them all
        steps, losses, rates, markers, slow = _scan(ANSI.sub(b"", raw))
    return steps, losses, rates, markers


def _scan(raw: object) -> tuple:
    buf = np.frombuffer(raw, np.uint8)  # type: ignore[call-overload]
    limit = max(0, buf.size - _WINDOW)
    marks = np.flatnonzero(buf[:limit] == _MARK[0])
    layouts = _sample_layouts(raw, marks)
    found = np.zeros(marks.size, bool)  # the row is a "(step=" marker
    parsed = np.zeros(marks.size, bool)  # ... and the fast path parsed it
    values = np.zeros((3, marks.size))
    windows = sliding_window_view(buf, _WINDOW) if buf.size >= _WINDOW else None
    for first in range(0, marks.size, _CHUNK):
        rows = _window_rows(windows, marks[first:first + _CHUNK])
        end = first + rows.shape[0]
        is_mark = _text(rows, 0, _MARK)
        found[first:end] = is_mark
        if layouts and is_mark.all():  # the usual case: every row one layout, slices instead of indices
            good, step, loss, rate = _parse(rows, layouts[0])
            if good.all():
                parsed[first:end] = True
                values[0, first:end], values[1, first:end], values[2, first:end] = step, loss, rate
                continue
        left = np.flatnonzero(is_mark)
        for layout in layouts:
            if not left.size:
                break
            good, step, loss, rate = _parse(rows[left], layout)
            at = first + left[good]
            parsed[at] = True
            values[:, at] = (step[good], loss[good], rate[good])
            left = left[~good]
    tail = _tail_marks(raw, limit)
    markers = int(found.sum()) + tail.size
    slow_at = np.concatenate([marks[found & ~parsed], tail])
    if not slow_at.size:  # every marker parsed; rows of a "(" that starts no marker are left out
        return values[0, parsed].astype(np.int64), values[1, parsed], values[2, parsed], markers, 0
    matched = [(int(q), m.groups()) for q in slow_at.tolist() for m in (LINE.match(raw, q),) if m]
    where = np.array([q for q, _ in matched], dtype=np.int64)
    slow = np.array([[float(v) for v in groups] for _, groups in matched]).reshape(-1, 3).T
    order = np.argsort(np.concatenate([marks[parsed], where]), kind="stable")
    merged = np.concatenate([values[:, parsed], slow], axis=1)[:, order]
    return merged[0].astype(np.int64), merged[1], merged[2], markers, slow_at.size - len(matched)


def _window_rows(windows: object, marks: np.ndarray) -> np.ndarray:
    if windows is None or not marks.size:
        return np.zeros((marks.size, _WINDOW), np.uint8)
    return windows[marks]  # type: ignore[index]


def _tail_marks(raw: bytes, limit: int) -> np.ndarray:
    found, at = [], raw.find(_MARK, limit)
    while at >= 0:
        found.append(at)
        at = raw.find(_MARK, at + 1)
    return np.array(found, dtype=np.int64)


def _sample_layouts(raw: bytes, marks: np.ndarray) -> list:
    """The layouts of a sample of loss lines spread over the file, commonest first."""
    if not marks.size:
        return []
    picks = np.unique(np.linspace(0, marks.size - 1, min(marks.size, _SAMPLE * 8)).astype(np.int64))
    seen: Counter = Counter()
    for q in marks[picks].tolist():
        m = LINE.match(raw, q)
        if m is None:
            continue
        loss, rate = _shape(m.group(2)), _shape(m.group(3))
        if loss is not None and rate is not None and len(m.group(0)) < _WINDOW - 8:
            seen[_Layout(len(m.group(1)), loss, rate)] += 1
        if sum(seen.values()) >= _SAMPLE:
            break
    return [layout for layout, _ in seen.most_common()]


def _shape(text: bytes) -> object:
    digits = sum(ch in b"0123456789" for ch in text)
    if not _PLAIN.match(text) or not 0 < digits <= 15:
        return None
    return _Shape(len(text), text.find(b"."), text[:1] in (b"-", b"+"))


def _word(rows: np.ndarray, col: int) -> np.ndarray:
    """Bytes ``col .. col+7`` of each row as one little-endian uint64 (an unaligned view, nothing copied)."""
    return np.ndarray((rows.shape[0],), "<u8", rows, col, (rows.strides[0],))


def _text(rows: np.ndarray, col: int, text: bytes) -> np.ndarray:
    """Whether each row holds ``text`` at column ``col``, compared 8 bytes at a time."""
    ok = np.ones(rows.shape[0], bool)
    for start in range(0, len(text), 8):
        chunk = text[start:start + 8]
        want = int.from_bytes(chunk, "little")
        mask = (1 << (8 * len(chunk))) - 1
        ok &= (_word(rows, col + start) & mask) == want
    return ok


def _parse(rows: np.ndarray, layout: _Layout) -> tuple:
    """Check the rows against one layout and read its three numbers: (fits, step, loss, rate)."""
    col = len(_MARK)
    step, ok = _number(rows, col, _Shape(layout.step, -1, False))
    col += layout.step
    ok &= _text(rows, col, _MID)
    col += len(_MID)
    loss, good = _number(rows, col, layout.loss)
    ok &= good
    col += layout.loss.length
    ok &= _text(rows, col, _SEP)
    col += len(_SEP)
    rate, good = _number(rows, col, layout.rate)
    ok &= good & _ENDS_NUMBER[rows[:, col + layout.rate.length]]
    return ok, step, loss, rate


def _number(rows: np.ndarray, col: int, shape: _Shape) -> tuple:
    """The numbers written in ``shape`` at column ``col`` of each row, and whether each row really has that shape."""
    digits = shape.length - (shape.dot >= 0) - shape.sign
    if shape.length <= 8:
        mantissa, negative, valid = _eight_digits(rows, col, shape, digits)
    else:
        mantissa, negative, valid = _digit_columns(rows, col, shape)
    values = mantissa / _POW10[shape.length - 1 - shape.dot if shape.dot >= 0 else 0]
    if shape.sign:
        values[negative] *= -1
    return values, valid


def _eight_digits(rows: np.ndarray, col: int, shape: _Shape, digits: int) -> tuple:
    """SWAR: the field's 8 bytes as one little-endian uint64, dot and sign squeezed out, padded with leading
    '0's, checked and converted with three multiplications (the method of simdjson's parse_eight_digits)."""
    word = _word(rows, col)
    valid = np.ones(word.size, bool)
    negative = np.zeros(word.size, bool)
    if shape.dot >= 0:
        low = (1 << (8 * shape.dot)) - 1
        valid &= (word >> (8 * shape.dot)) & 0xFF == 0x2E
        word = (word & low) | ((word >> 8) & (0xFFFFFFFFFFFFFFFF ^ low))
    if shape.sign:
        first = word & 0xFF
        negative = first == 0x2D
        valid &= negative | (first == 0x2B)
        word = word >> 8
    pad = 8 * (8 - digits)
    if pad:
        word = ((word & ((1 << (8 * digits)) - 1)) << pad) | (0x3030303030303030 & ((1 << pad) - 1))
    valid &= ((word & 0xF0F0F0F0F0F0F0F0) | (((word + 0x0606060606060606) & 0xF0F0F0F0F0F0F0F0) >> 4)) \
        == 0x3333333333333333
    word = ((word & 0x0F0F0F0F0F0F0F0F) * 2561) >> 8
    word = ((word & 0x00FF00FF00FF00FF) * 6553601) >> 16
    word = ((word & 0x0000FFFF0000FFFF) * 42949672960001) >> 32
    return word.astype(np.int64), negative, valid


def _digit_columns(rows: np.ndarray, col: int, shape: _Shape) -> tuple:
    """One column at a time, for fields longer than 8 bytes."""
    valid = np.ones(rows.shape[0], bool)
    negative = np.zeros(rows.shape[0], bool)
    mantissa = np.zeros(rows.shape[0], np.int64)
    for i in range(shape.length):
        char = rows[:, col + i]
        if i == shape.dot:
            valid &= char == 46
        elif i == 0 and shape.sign:
            negative = char == 45
            valid &= negative | (char == 43)
        else:
            digit = char - np.uint8(48)
            valid &= digit < 10
            mantissa *= 10
            mantissa += digit
    return mantissa, negative, valid
