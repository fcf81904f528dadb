# Request ids: the seed's strings mapped to rsp's 64-bit ids.
#
# A string maps to the first 8 bytes, little-endian, of BLAKE2b (digest
# size 8) of its UTF-8 bytes: the same in every process, rank and Python
# version, unlike hash(), which is randomised per process. An int is used
# as it is (0 <= rid < 2**64); a string and an int with one 64-bit id are
# never live at once. docs/python.md has the rule.
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
    """The live request ids of one pool and their 64-bit ids.

    A string and an int are one request to rsp when the int is the string's
    64-bit id, so the map refuses (ValueError, naming both) any id whose
    64-bit id another live id already has: a second string (the 2**-64
    collision), an int equal to a live string's id (rid64("req-1")), or a
    string whose id is a live int. Not thread-safe on its own: the pool
    guards it with its lock.
    """

    def __init__(self):
        self._ids = {}      # str -> u64, live strings
        self._owner = {}    # u64 -> str, live strings
        self._ints = set()  # live int ids

    @property
    def cache_get(self):
        """A function: a string rid's 64-bit id if this map has seen it,
        else None (the cache dict's own get, C-speed, for marshalling a
        step's rows)."""
        return self._ids.get

    def _string_with(self, v):
        other = self._owner.get(v)
        if other is not None:
            raise ValueError(f"request id {v} (an int) is the 64-bit id of the live string "
                             f"request id {other!r}: both would name one request; remove "
                             f"{other!r} first or use it")
        return v

    def _new_string(self, rid, v):
        other = self._owner.get(v)
        if other is not None and other != rid:
            raise ValueError(f"request ids {other!r} and {rid!r} map to the same 64-bit id "
                             f"{v:#x}; remove one first")
        if v in self._ints:
            raise ValueError(f"request id {rid!r} maps to the 64-bit id {v}, which is the live "
                             f"int request id {v}: both would name one request; remove {v} "
                             f"first")
        return v

    def get(self, rid):
        """The 64-bit id of rid, registering it as live."""
        if not isinstance(rid, str):
            v = self._string_with(rid64(rid))
            self._ints.add(v)
            return v
        v = self._ids.get(rid)
        if v is None:
            v = self._new_string(rid, rid64(rid))
            self._ids[rid] = v
            self._owner[v] = rid
        return v

    def add_ints(self, ids):
        """Register a step's int ids (a list of ints already checked to fit
        64 bits) as live: the marshalling's fast path, set operations at C
        speed."""
        owner = self._owner
        if owner and not owner.keys().isdisjoint(ids):
            for v in ids:
                self._string_with(v)
        self._ints.update(ids)

    def lookup(self, rid):
        """The 64-bit id of rid without registering it."""
        if isinstance(rid, str):
            v = self._ids.get(rid)
            return v if v is not None else self._new_string(rid, rid64(rid))
        return self._string_with(rid64(rid))

    def forget(self, rid):
        if isinstance(rid, str):
            v = self._ids.pop(rid, None)
            if v is not None and self._owner.get(v) == rid:
                del self._owner[v]
        else:
            self._ints.discard(rid)
