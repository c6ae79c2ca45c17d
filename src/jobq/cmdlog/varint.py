"""Go/protobuf varints: ``uvarint`` (7 bits a byte, low groups first) and zigzag ``varint``."""

from __future__ import annotations

#: the longest uvarint of a uint64, in bytes
MAX_UVARINT_LEN = 10


class VarintError(ValueError):
    """A varint is truncated, too long, or out of range."""


def encode_uvarint(value: int) -> bytes:
    """Encode a non-negative integer < 2**64 as Go's ``binary.PutUvarint`` does."""
    if value < 0 or value >= 1 << 64:
        raise VarintError(f"uvarint out of range: {value}")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a uvarint at ``buf[pos:]``; return ``(value, next_pos)``.

    Raises :class:`VarintError` when the buffer ends first (``truncated``) or the varint
    overflows 64 bits.
    """
    result = 0
    shift = 0
    end = len(buf)
    for i in range(MAX_UVARINT_LEN):
        if pos + i >= end:
            raise VarintError("truncated uvarint")
        byte = buf[pos + i]
        if byte < 0x80:
            if i == MAX_UVARINT_LEN - 1 and byte > 1:
                raise VarintError("uvarint overflows 64 bits")
            return result | (byte << shift), pos + i + 1
        result |= (byte & 0x7F) << shift
        shift += 7
    raise VarintError("uvarint overflows 64 bits")


def encode_varint(value: int) -> bytes:
    """Encode a signed integer in [-2**63, 2**63) with zigzag, as Go's ``binary.PutVarint``."""
    if value < -(1 << 63) or value >= 1 << 63:
        raise VarintError(f"varint out of range: {value}")
    return encode_uvarint((value << 1) ^ (value >> 63) if value < 0 else value << 1)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varint; return ``(value, next_pos)``."""
    raw, pos = decode_uvarint(buf, pos)
    value = raw >> 1
    if raw & 1:
        value = ~value
    return value, pos
