"""Private helpers of kvfs.py (not an API of their own): the address of
memory an engine hands over as an object (a numpy array, a buffer-protocol
object, anything with data_ptr() such as a CPU torch tensor), and the one
asyncio reader of a client's event fd that Batch.wait_async shares. Kept
apart so kvfs.py stays the ctypes binding itself.
"""

import asyncio
import ctypes

try:
    import numpy as np
except ImportError:
    np = None


def tensor_memory(obj):
    """(address, nbytes) of an object with data_ptr() (a torch tensor):
    refused unless it is in CPU memory and contiguous, since the address of
    anything else is not bytes this process can read."""
    dev = getattr(obj, "device", None)
    if dev is not None and getattr(dev, "type", "cpu") != "cpu":
        raise ValueError("kvfs: %s memory is not host memory" % dev)
    if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
        raise ValueError("kvfs: a tensor must be contiguous")
    nbytes = getattr(obj, "nbytes", None)
    if nbytes is None:
        nbytes = obj.numel() * obj.element_size()
    return obj.data_ptr(), int(nbytes)


def memory_of(obj):
    """(address, nbytes) of contiguous memory: a numpy array, an object
    with data_ptr() (torch), or one with the (writable) buffer protocol."""
    if np is not None and isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise ValueError("kvfs: the array must be C-contiguous")
        return obj.__array_interface__["data"][0], obj.nbytes
    if callable(getattr(obj, "data_ptr", None)):
        return tensor_memory(obj)
    with memoryview(obj) as m:
        if not m.c_contiguous:
            raise ValueError("kvfs: the buffer must be contiguous")
        if m.nbytes == 0:
            raise ValueError("kvfs: an empty buffer has no place in a region")
        if m.readonly:
            if np is None:
                raise TypeError("kvfs: a read-only buffer's address needs numpy")
            a = np.frombuffer(m, np.uint8)
            addr = a.__array_interface__["data"][0]
            del a      # before m is released
            return addr, m.nbytes
        cbuf = (ctypes.c_char * m.nbytes).from_buffer(m)
        try:
            return ctypes.addressof(cbuf), m.nbytes
        finally:
            del cbuf


def is_torch_dtype(dtype):
    return type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"


def itemsize(dtype):
    """Bytes per item of a numpy or torch dtype (torch.bfloat16: 2)."""
    if is_torch_dtype(dtype):
        return dtype.itemsize
    if np is None:
        raise ImportError("kvfs: this call needs numpy (apt-get install python3-numpy)")
    return np.dtype(dtype).itemsize


def view_of(region, dtype, offset, shape, strides=None):
    """A view of region memory: a numpy array, or a CPU torch tensor when
    dtype is a torch dtype; strides in bytes (None: C-contiguous)."""
    if not is_torch_dtype(dtype):
        return region.array(dtype, offset, shape=shape, strides=strides)
    import torch
    size = dtype.itemsize
    if strides is None:
        strides, step = [], size
        for dim in reversed(shape):
            strides.insert(0, step)
            step *= dim
    if any(s % size for s in strides) or offset % size:
        raise ValueError("kvfs: offset and strides must be multiples of %d" % size)
    items = 1 + sum((d - 1) * s // size for d, s in zip(shape, strides)) \
        if all(shape) else 0
    if offset + items * size > region.size:
        raise ValueError("kvfs: the view does not fit in the region")
    # frombuffer keeps the region's memory object (and so the region) alive
    flat = torch.frombuffer(region._memory(), dtype=dtype, count=items, offset=offset) \
        if items else torch.empty(0, dtype=dtype)
    return flat.as_strided(tuple(shape), tuple(s // size for s in strides))


def byte_view(data):
    """A flat, contiguous byte view of bytes-like data, a numpy array
    (copied only if the array is not contiguous) or a CPU tensor with
    data_ptr() (viewed in place: it must be contiguous)."""
    if np is not None and isinstance(data, np.ndarray):
        return memoryview(np.ascontiguousarray(data)).cast("B")
    if callable(getattr(data, "data_ptr", None)) and not has_buffer(data):
        addr, n = tensor_memory(data)
        arr = (ctypes.c_uint8 * n).from_address(addr)
        arr._owner = data      # the tensor outlives the view
        return memoryview(arr).cast("B")
    return memoryview(data).cast("B")


def is_readonly(obj):
    """True for memory that must not be written: a read-only numpy array
    or buffer (bytes). Tensors (data_ptr()) count as writable."""
    if np is not None and isinstance(obj, np.ndarray):
        return not obj.flags.writeable
    if callable(getattr(obj, "data_ptr", None)) and not has_buffer(obj):
        return False
    with memoryview(obj) as m:
        return m.readonly


def has_buffer(obj):
    try:
        memoryview(obj).release()
        return True
    except TypeError:
        return False


class AsyncDispatch:
    """One reader of a client's event_fd() on one asyncio loop, shared by
    every wait_async() of the client: an eventfd has one count, so two
    readers would take each other's wakeups."""

    def __init__(self, client, loop):
        self.client = client
        self.loop = loop
        self.fd = client.event_fd()
        self.waiting = {}      # Batch -> Future
        self.reading = False

    @classmethod
    def of(cls, client):
        """The client's dispatcher on the running loop (client._dispatch,
        under client._lock): one loop per client at a time."""
        loop = asyncio.get_running_loop()
        with client._lock:
            d = client._dispatch
            if d is None or (d.loop is not loop and (not d.waiting or d.loop.is_closed())):
                d = client._dispatch = cls(client, loop)
            elif d.loop is not loop:
                raise RuntimeError("kvfs: a client's batches are awaited "
                                   "from one event loop at a time")
            return d

    def wait(self, batch):
        fut = self.loop.create_future()
        res = batch.poll()
        if res is not None:
            fut.set_result(res)
            return fut
        self.waiting[batch] = fut
        if not self.reading:
            # Level-triggered: a completion since poll() above fires at once.
            self.loop.add_reader(self.fd, self._on_event)
            self.reading = True
        return fut

    def _on_event(self):
        self.client.drain_events()     # first, then poll: nothing is missed
        for b, fut in list(self.waiting.items()):
            if fut.done():            # cancelled: the caller collects it
                del self.waiting[b]
                continue
            try:
                res = b.poll()
            except (OSError, ValueError) as e:
                del self.waiting[b]
                fut.set_exception(e)
                continue
            if res is not None:
                del self.waiting[b]
                fut.set_result(res)
        if not self.waiting:
            self.loop.remove_reader(self.fd)
            self.reading = False

