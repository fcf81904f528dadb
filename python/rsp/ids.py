# Request ids: the seed's strings mapped to rsp's 64-bit ids.
#
# A string maps to the first 8 bytes, little-endian, of BLAKE2b (digest
# size 8) of its UTF-8 bytes: the same in every process, rank and Python
# version, unlike hash(), which is randomised per process. An int is used
# as it is (0 <= rid < 2**64). docs/python.md has the rule.
#
# SPDX-License-Identifier: Apache-2.0
import hashlib

_U64 = 1 << 64


def rid64(rid):
    """The 64-bit id rsp uses for request id `rid` (a str or an int)."""
    if isinstance(rid, str):
        return int.from_bytes(hashlib.blake2b(rid.encode("utf-8"), digest_size=8).digest(),
                              "little")
    if isinstance(rid, bool) or not isinstance(rid, int):
        raise TypeError(f"request id must be a str or an int, not {type(rid).__name__}")
    if not 0 <= rid < _U64:
        raise ValueError(f"request id {rid} does not fit 64 bits")
    return rid


class RidMap:
    """The live string ids of one pool and their 64-bit ids.

    Refuses (ValueError) a second live string with the id of another, the
    2**-64 collision, rather than letting two requests share state. Not
    thread-safe on its own: the pool guards it with its lock.
    """

    def __init__(self):
        self._ids = {}    # str -> u64 (cache, live and recently seen)
        self._owner = {}  # u64 -> str, live strings only

    @property
    def cache_get(self):
        """A function: a string rid's 64-bit id if this map has seen it,
        else None (the cache dict's own get, C-speed, for marshalling a
        step's rows)."""
        return self._ids.get

    def get(self, rid):
        """The 64-bit id of rid, registering a string as live."""
        if not isinstance(rid, str):
            return rid64(rid)
        v = self._ids.get(rid)
        if v is None:
            v = rid64(rid)
            other = self._owner.get(v)
            if other is not None and other != rid:
                raise ValueError(f"request ids {other!r} and {rid!r} map to the same 64-bit id "
                                 f"{v:#x}; remove one first")
            self._ids[rid] = v
            self._owner[v] = rid
        return v

    def lookup(self, rid):
        """The 64-bit id of rid without registering it."""
        if isinstance(rid, str):
            v = self._ids.get(rid)
            return v if v is not None else rid64(rid)
        return rid64(rid)

    def forget(self, rid):
        if isinstance(rid, str):
            v = self._ids.pop(rid, None)
            if v is not None and self._owner.get(v) == rid:
                del self._owner[v]
