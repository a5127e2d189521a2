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

