"""Reads a sinkrt checkpoint (schemas/checkpoint.fbs) without the flatbuffers
package: just enough of the FlatBuffers layout to list its tensors."""

import struct

import numpy as np

DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.int64, 5: np.uint8}


class _Table:
    def __init__(self, buf, pos):
        self.buf, self.pos = buf, pos
        vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        size = struct.unpack_from("<H", buf, vtable)[0]
        self.fields = struct.unpack_from(f"<{(size - 4) // 2}H", buf, vtable + 4)

    def _at(self, field):
        return self.pos + self.fields[field] if field < len(self.fields) and self.fields[field] else None

    def scalar(self, field, fmt, default=0):
        at = self._at(field)
        return default if at is None else struct.unpack_from(fmt, self.buf, at)[0]

    def _target(self, field):
        at = self._at(field)
        return None if at is None else at + struct.unpack_from("<I", self.buf, at)[0]

    def vector(self, field):
        """(start, length) of a vector field, (0, 0) when absent."""
        at = self._target(field)
        return (0, 0) if at is None else (at + 4, struct.unpack_from("<I", self.buf, at)[0])

    def string(self, field):
        start, n = self.vector(field)
        return self.buf[start:start + n].decode()

    def tables(self, field):
        start, n = self.vector(field)
        return [_Table(self.buf, p + struct.unpack_from("<I", self.buf, p)[0])
                for p in range(start, start + 4 * n, 4)]


def read_checkpoint(path):
    """{name: numpy array} of every tensor in the checkpoint, plus its network name."""
    with open(path, "rb") as f:
        buf = f.read()
    if buf[4:8] != b"SKCK":
        raise ValueError(f"{path}: not a sinkrt checkpoint (file identifier {buf[4:8]!r}, expected b'SKCK')")
    root = _Table(buf, struct.unpack_from("<I", buf, 0)[0])
    tensors = {}
    for t in root.tables(9):
        dtype = DTYPES.get(t.scalar(1, "<B"))
        start, n = t.vector(2)
        shape = struct.unpack_from(f"<{n}q", buf, start)
        start, n = t.vector(4)
        if dtype is None:
            continue
        tensors[t.string(0)] = np.frombuffer(buf, dtype=dtype, count=n // np.dtype(dtype).itemsize,
                                             offset=start).reshape(shape)
    return root.string(3), tensors
