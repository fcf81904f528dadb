# DLPack: librsp's exports (rsp_pool_block_dlpack, rsp_plan_addressing_dlpack)
# handed to torch without a copy.
#
# librsp returns a DLManagedTensor whose deleter is C code holding what the
# memory needs (the pool's storage, or the plan): this module only wraps the
# pointer in a "dltensor" capsule and gives it to torch.utils.dlpack.from_dlpack,
# which takes ownership (it renames the capsule "used_dltensor" and calls the
# deleter when the last tensor sharing the memory goes). No Python code runs
# when the memory is released, so garbage-collection order and interpreter
# exit cannot free it twice or too early.
#
# SPDX-License-Identifier: Apache-2.0
import ctypes
import threading


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.c_void_p),
]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def release(ptr):
    """Call the export's own deleter (an export torch did not take)."""
    mt = ctypes.cast(ptr, ctypes.POINTER(DLManagedTensor)).contents
    if mt.deleter:
        DELETER(mt.deleter)(ctypes.cast(ptr, ctypes.POINTER(DLManagedTensor)))


_TORCH = []
_TORCH_LOCK = threading.Lock()


def torch_module():
    """The torch module with torch.utils.dlpack loaded, or None without torch.

    Imported once, under a lock: torch's own first import is not safe from
    two threads at once (torch.utils imports torch back, and the import
    system's deadlock avoidance hands the second thread a half-initialised
    torch, which then fails with NameError for good), and the package's
    first tensor is often made on a reader thread."""
    if not _TORCH:
        with _TORCH_LOCK:
            if not _TORCH:
                try:
                    import torch
                    import torch.utils.dlpack  # noqa: F401
                except ImportError:
                    torch = None
                _TORCH.append(torch)
    return _TORCH[0]


def to_torch(ptr):
    """A torch tensor sharing the memory of export `ptr` (a DLManagedTensor *)."""
    torch = torch_module()
    if torch is None:
        release(ptr)
        raise ImportError("rsp: torch is not installed; tensors need it")
    try:
        capsule = _capsule_new(ptr, b"dltensor", None)
        return torch.utils.dlpack.from_dlpack(capsule)
    except BaseException:
        # Not consumed (torch refused it, or no memory for the capsule): the
        # export is still ours to release.
        release(ptr)
        raise
