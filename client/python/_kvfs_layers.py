"""Private part of kvfs.py (not an API of its own): the Client's calls on
whole layers and page lists, kept apart so kvfs.py stays the ctypes
binding itself. kvfs.Client inherits them; their documentation is
kvfs.Client's.

Where a layer's pages land (read) or come from (write):
  - rows of a region: views of it are returned (zero copy);
  - `out` / data lying in a region of the same client (an engine's host
    pool registered with region_from_fd, or a Region.tensor() view): the
    daemon moves the bytes straight to or from it (zero copy);
  - anything else with data_ptr() (a torch tensor, pinned or not) or the
    buffer protocol: staged through a region of the client's, with one
    memcpy per call (read: after the daemon filled the staging rows;
    write: before it takes them). Correct, and slower: the copy costs
    about what the page traffic itself does on a fast device.
"""

import ctypes
import errno
import os

import kvfs
from _kvfs_util import byte_view, is_readonly, itemsize, memory_of, view_of


class LayerCalls:
    """kvfs.Client's layer and page-list calls (a mixin)."""

    def read_layer(self, layer, names, page_bytes, dtype="uint8",
                   region=None, offset=0, out=None):
        """Read the pages names of one layer into consecutive rows.

        Without out, returns an array of shape (len(names), page_bytes //
        itemsize) that views region memory: a new region sized for the
        call unless region is given, in which case rows start at byte
        offset of it (and the control area follows them). The returned
        array keeps a new region registered until it is freed, and a
        process holds at most 64 regions (OSError EMFILE past them): pass
        region= (or out=) for results that are kept. dtype is a
        numpy dtype (a numpy array is returned) or a torch dtype such as
        torch.bfloat16 (a CPU tensor). Rows are 4 KiB apart so the daemon
        can read with O_DIRECT; a page shorter than page_bytes is padded
        with zeros.

        out: instead, memory of exactly len(names) * page_bytes bytes,
        rows page_bytes apart (a contiguous tensor, array or writable
        buffer), which is filled and returned. If it lies in a region of
        this client (a registered host pool, a Region.tensor() view) the
        pages go straight into it; otherwise they are staged through a
        region (region, or a new one) and copied into out with one memcpy:
        slower (the module documentation of _kvfs_layers says by how much).

        Raises PageError for the first page that failed (e.g. ENOENT
        missing, ENOBUFS larger than page_bytes); out may then hold the
        pages that did arrive."""
        return LayerRead(self, layer, names, page_bytes, dtype, region, offset, out,
                         sync=True).wait()

    def read_layer_async(self, layer, names, page_bytes, dtype="uint8",
                         region=None, offset=0, out=None):
        """read_layer without waiting: returns a LayerRead at once, whose
        wait(), poll() (None while in flight) or `await x.wait_async()`
        gives what read_layer returns (or raises its PageError). The
        client's event_fd() turns readable when it completes (drain it,
        then poll every LayerRead in flight). Keep region (and out)
        untouched until then; a region given is not free for another call
        until it is collected."""
        return LayerRead(self, layer, names, page_bytes, dtype, region, offset, out,
                         sync=False)

    def write_layer_async(self, layer, names, data, durable=False, replace=False,
                          region=None, offset=0):
        """write_layer without waiting: returns a LayerWrite whose wait(),
        poll() or `await x.wait_async()` gives the handles (or raises
        PageError). data is one object whose rows are the pages (a
        contiguous 2-D tensor or array: len(names) rows) or a sequence of
        bytes-like pages. Rows of one object lying in a region of this
        client are stored straight from it (zero copy: leave them
        unchanged until collected); anything else is first copied into a
        region (region at offset, or a new one): one memcpy, after which
        data is free again."""
        return LayerWrite(self, layer, names, data, durable, replace, region, offset)

    def lookup_prefix(self, names, layers):
        """How many leading blocks of names are stored in every one of
        layers (a count, or an iterable of layer numbers)?

        Returns (hit_blocks, handles, sizes): handles and sizes are uint64
        arrays of shape (len(names), len(layers)), copies; a handle of 0
        means the page is not available (missing, or still being written).
        Handles can be read with Batch.add_handle."""
        kvfs._need_numpy()
        names = list(names)
        layers = list(range(layers)) if isinstance(layers, int) else list(layers)
        n, nl = len(names), len(layers)
        if n == 0 or nl == 0:
            raise ValueError("need at least one name and one layer")
        with self._lock:
            self._handle()
            r = self._scratch_region(kvfs.Batch.ctl_bytes(n * nl))
            with r.batch(0, n * nl) as b:
                for name in names:
                    for layer in layers:
                        b.add(layer, name)
                res = b.lookup(nl)
                d = b.descs
                handles = d["handle"].reshape(n, nl).copy()
                sizes = d["bytes"].reshape(n, nl).copy()
                del d
        return res.done, handles, sizes

    def prefetch_layer(self, layer, names):
        """Warm the daemon's RAM tier with these pages of one layer (say,
        the next layer while this one computes); returns at once with a
        Result (done = pages queued or already in RAM)."""
        names = list(names)
        if not names:
            raise ValueError("need at least one name")
        with self._lock:
            self._handle()
            r = self._scratch_region(kvfs.Batch.ctl_bytes(len(names)))
            with r.batch(0, len(names)) as b:
                for name in names:
                    b.add(layer, name)
                return b.prefetch()

    def write_pages(self, pages, durable=False, replace=False, region=None,
                    offset=0):
        """Store pages, each (layer, name, data), in one fast-path call.

        data is anything bytes-like (bytes, memoryview, numpy array, a
        contiguous CPU tensor): it is copied into region memory (the
        client's own scratch region unless region is given, then from byte
        offset of it, the control area after the data) and the daemon
        copies it again, so the caller's buffers are free on return.
        durable: return only once every page is durable, else once
        visible. replace: replace pages of the same name, else EEXIST.
        Returns the new pages' handles; raises PageError for the first page
        that failed (the others are stored). Calls without a region take
        turns on the scratch region; give each thread a region to write in
        parallel."""
        pages = [(int(layer), os.fsencode(name), byte_view(data))
                 for layer, name, data in pages]
        if not pages or any(len(v) == 0 for _, _, v in pages):
            raise ValueError("need at least one page, and no empty page")
        if region is not None:
            return self._write_into(region, offset, pages, durable, replace)
        if offset:
            raise ValueError("offset needs a region")
        with self._lock:
            self._handle()
            end = sum(kvfs._round_up(len(v), kvfs._ALIGN) for _, _, v in pages)
            r = self._scratch_region(end + kvfs.Batch.ctl_bytes(len(pages)))
            return self._write_into(r, 0, pages, durable, replace)

    def _write_into(self, region, offset, pages, durable, replace):
        n = len(pages)
        b, offs = _copy_in(region, offset, pages)
        with b:
            for (layer, name, v), off in zip(pages, offs):
                b.add(layer, name, off, len(v))
            b.write(durable=durable, replace=replace)
            st = b.statuses()
            handles = [b.handle(i) for i in range(n)]
        bad = next((i for i in range(n) if st[i]), None)
        if bad is not None:
            raise kvfs.PageError(-st[bad], os.fsdecode(pages[bad][1]), bad, st)
        return handles

    def write_layer(self, layer, names, data, durable=False, replace=False,
                    region=None, offset=0):
        """Store one page per name in layer: data is a sequence of
        bytes-like pages, or an array or tensor whose rows are the pages
        (e.g. the (len(names), page_bytes // itemsize) array read_layer
        returns). Returns the handles; raises PageError as write_pages."""
        names = list(names)
        if len(data) != len(names):
            raise ValueError("need one page of data per name")
        return self.write_pages([(layer, name, data[i]) for i, name in enumerate(names)],
                                durable=durable, replace=replace, region=region,
                                offset=offset)

    def _region_of(self, addr, nbytes):
        """The open region of this client that holds [addr, addr + nbytes),
        or None."""
        with self._lock:
            regions = list(self._regions)
        for r in regions:
            if r._h is not None and not r._closing and r.base <= addr and \
                    addr + nbytes <= r.base + r.size:
                return r
        return None


def _copy_in(region, offset, pages):
    """Copy the pages' bytes into region from offset, 4 KiB apart, and
    make a batch whose control area follows them. Returns (batch, offsets)."""
    offs, end = [], offset
    for _, _, v in pages:
        offs.append(end)
        end = kvfs._round_up(end + len(v), kvfs._ALIGN)
    if end + kvfs.Batch.ctl_bytes(len(pages)) > region.size:
        raise OSError(errno.ERANGE, "region too small for %d pages" % len(pages))
    for (_, _, v), off in zip(pages, offs):
        region.buffer(off, len(v))[:] = v
    return region.batch(end, len(pages)), offs


def _fresh(e):
    """A new exception like e, raised in its place each time the outcome is
    asked for (never the kept one: see _Pending._settle)."""
    if isinstance(e, kvfs.PageError):
        return kvfs.PageError(e.errno, e.filename, e.index, e.statuses)
    if isinstance(e, OSError):
        return OSError(e.errno, e.strerror, e.filename)
    return type(e)(*e.args)


def _attempt(fn):
    """(fn(), None), or (None, the OSError it raised)."""
    try:
        return fn(), None
    except OSError as e:
        return None, e


class _Pending:
    """A call on a layer in flight: submit at construction (or run it,
    sync), collect once with wait() / poll() / wait_async(); the outcome
    (a value or an exception) is kept and given again on later calls."""

    def _start(self, sync):
        self._done = False
        self._value = self._error = None
        try:
            if sync:
                self._run()
                self._settle(None)
            else:
                self._submit()
        except BaseException:
            self._cleanup()
            raise

    @property
    def done(self):
        """True once the outcome is collected (by wait, poll or wait_async)."""
        return self._done

    def _outcome(self):
        if self._error is not None:
            raise _fresh(self._error)
        return self._value

    def _settle(self, err):
        """The batch's call is over (err: its whole-call OSError, or None):
        take the outcome, keeping an exception without its traceback (its
        frames refer to this call, so to out and its region, which must not
        outlive the caller's references through a cycle); free the batch."""
        try:
            if err is None:
                self._value = self._finish()
        except (OSError, ValueError) as e:
            err = e
        finally:
            self._done = True
            self._cleanup()
        if err is not None:
            self._error = err.with_traceback(None)
            err.__context__ = None

    def wait(self):
        """Block (without the GIL) until the call is done; its outcome."""
        if not self._done:
            self._settle(_attempt(self.batch.wait)[1])
        return self._outcome()

    def poll(self):
        """Never blocks: the outcome once done, None while in flight."""
        if not self._done:
            res, err = _attempt(self.batch.poll)
            if res is None and err is None:
                return None
            self._settle(err)
        return self._outcome()

    async def wait_async(self):
        """Await the outcome without blocking the event loop (as
        Batch.wait_async: the client's event fd, one loop per client)."""
        if not self._done:
            err = None
            try:
                await self.batch.wait_async()
            except OSError as e:
                err = e
            self._settle(err)
        return self._outcome()

    def _cleanup(self):
        b, self.batch = getattr(self, "batch", None), None
        if b is not None:
            b.close()
        own, self._own = getattr(self, "_own", None), None
        if own is not None and own._closable():
            own.close()


class LayerRead(_Pending):
    """One layer's read (Client.read_layer_async). Attributes: staged
    (True when pages go through a staging region, then one memcpy into
    out), names; wait() / poll() / wait_async() as the module says."""

    def __init__(self, client, layer, names, page_bytes, dtype, region, offset, out,
                 sync=False):
        self.names = list(names)
        self.page_bytes = page_bytes
        self.dtype = dtype
        n = len(self.names)
        size = itemsize(dtype)
        if n == 0 or page_bytes <= 0 or page_bytes % size:
            raise ValueError("need at least one name, and page_bytes a "
                             "positive multiple of the dtype's size")
        if offset and region is None:
            raise ValueError("offset needs a region")
        self.out, self.staged, self._own, self.batch = out, False, None, None
        ctl_bytes = kvfs.Batch.ctl_bytes(n)
        target = None
        if out is not None:
            if is_readonly(out):
                raise TypeError("kvfs: out is read-only memory")
            addr, nbytes = memory_of(out)
            if nbytes != n * page_bytes:
                raise ValueError("out has %d bytes, %d pages of %d need %d"
                                 % (nbytes, n, page_bytes, n * page_bytes))
            target = client._region_of(addr, nbytes)
            self.staged = target is None
        if target is not None:
            # Straight into out: rows page_bytes apart in its region.
            self.stride, self.row0, self.data = page_bytes, addr - target.base, target
            ctl_off = kvfs._round_up(offset, kvfs._ALIGN)
        else:
            self.stride = kvfs._round_up(page_bytes, kvfs._ALIGN)
            self.row0 = offset
            ctl_off = kvfs._round_up(offset + n * self.stride, kvfs._ALIGN)
        if region is None:
            region = self._own = client.region(ctl_off + ctl_bytes)
        elif ctl_off + ctl_bytes > region.size:
            raise OSError(errno.ERANGE, "region too small for %d pages" % n)
        elif region is target and ctl_off < self.row0 + n * page_bytes \
                and self.row0 < ctl_off + ctl_bytes:
            raise ValueError("the control area at offset %d overlaps out" % ctl_off)
        self.region = region
        if target is None:
            self.data = region
        self.batch = region.batch(ctl_off, n)
        try:
            if self.data is not region:
                self.batch.set_data_region(self.data)
            for i, name in enumerate(self.names):
                self.batch.add(layer, name, self.row0 + i * self.stride, self.stride)
        except BaseException:
            self._cleanup()
            raise
        self._start(sync)

    def _run(self):
        self.batch.read()

    def _submit(self):
        self.batch.submit()

    def _finish(self):
        b, n, P = self.batch, len(self.names), self.page_bytes
        st = b.statuses()
        sizes = [b.status(i)[1] for i in range(n)]
        # A row is page_bytes rounded up to 4 KiB: a page a little larger
        # than page_bytes fits the row but not the result, and must fail
        # as the daemon fails a destination too small.
        for i in range(n):
            if st[i] == 0 and sizes[i] > P:
                st[i] = -errno.ENOBUFS
        base = self.data.base + self.row0
        for i in range(n):
            if st[i] == 0 and sizes[i] < P:
                ctypes.memset(base + i * self.stride + sizes[i], 0, P - sizes[i])
        if self.staged:
            dst = memory_of(self.out)[0]
            if self.stride == P:
                ctypes.memmove(dst, base, n * P)
            else:
                for i in range(n):
                    ctypes.memmove(dst + i * P, base + i * self.stride, P)
        bad = next((i for i in range(n) if st[i]), None)
        if bad is not None:
            raise kvfs.PageError(-st[bad], self.names[bad], bad, st)
        if self.out is not None:
            return self.out
        size = itemsize(self.dtype)
        return view_of(self.region, self.dtype, self.row0, (n, P // size),
                       (self.stride, size))


class LayerWrite(_Pending):
    """One layer's write (Client.write_layer_async). Attributes: staged
    (True when the bytes were copied into a region first), names; wait()
    / poll() / wait_async() give the pages' handles."""

    def __init__(self, client, layer, names, data, durable, replace, region, offset):
        self.names = [os.fsencode(nm) for nm in names]
        n = len(self.names)
        if n == 0 or len(data) != n:
            raise ValueError("need at least one name, and one page of data per name")
        if offset and region is None:
            raise ValueError("offset needs a region")
        self._own, self.batch = None, None
        ctl_bytes = kvfs.Batch.ctl_bytes(n)
        src = None
        if not isinstance(data, (list, tuple)):
            try:
                addr, nbytes = memory_of(data)
            except (TypeError, ValueError):
                addr = None
            if addr is not None and nbytes % n == 0 and nbytes:
                src = client._region_of(addr, nbytes)
        self.staged = src is None
        if src is not None:
            # Straight from the caller's rows, in a region of this client.
            P = nbytes // n
            if region is None:
                region = self._own = client.region(ctl_bytes)
            ctl_off = kvfs._round_up(offset, kvfs._ALIGN)
            if ctl_off + ctl_bytes > region.size:
                raise OSError(errno.ERANGE, "region too small for %d pages" % n)
            self.batch = region.batch(ctl_off, n)
            try:
                self.batch.set_data_region(src)
                for i, name in enumerate(self.names):
                    self.batch.add(layer, name, addr - src.base + i * P, P)
            except BaseException:
                self._cleanup()
                raise
        else:
            pages = [(layer, nm, byte_view(data[i])) for i, nm in enumerate(self.names)]
            if any(len(v) == 0 for _, _, v in pages):
                raise ValueError("no empty page")
            if region is None:
                need = sum(kvfs._round_up(len(v), kvfs._ALIGN) for _, _, v in pages)
                region = self._own = client.region(need + ctl_bytes)
            self.batch, offs = _copy_in(region, offset, pages)
            try:
                for (lay, nm, v), off in zip(pages, offs):
                    self.batch.add(lay, nm, off, len(v))
            except BaseException:
                self._cleanup()
                raise
        self._flags = (durable, replace)
        self._start(False)

    def _run(self):
        self.batch.write(*self._flags)

    def _submit(self):
        self.batch.submit_write(*self._flags)

    def _finish(self):
        b, n = self.batch, len(self.names)
        st = b.statuses()
        handles = [b.handle(i) for i in range(n)]
        bad = next((i for i in range(n) if st[i]), None)
        if bad is not None:
            raise kvfs.PageError(-st[bad], os.fsdecode(self.names[bad]), bad, st)
        return handles
