"""One large O_DIRECT write submitted by AIO (io_submit) into a page being
written, through a real mount (driven by aiowrite.sh): the kernel cuts it
into 1 MiB WRITE requests. The daemon copies a page's bytes into its
buffer outside its lock, trusting the kernel to send one write of an
inode at a time; with async direct I/O the kernel sent them together, so
a request could grow (move) the buffer under another's copy. Each page
must read back exactly."""
import ctypes
import mmap
import os
import struct
import sys

MIB = 1 << 20
SYS_IO_SETUP, SYS_IO_DESTROY, SYS_IO_GETEVENTS, SYS_IO_SUBMIT = 206, 207, 208, 209
IOCB_CMD_PWRITE = 1
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def fail(msg):
    print(f'FAIL: {msg}', file=sys.stderr)
    sys.exit(1)


def aio_pwrite(fd, buf_addr, size):
    ctx = ctypes.c_ulong(0)
    if libc.syscall(SYS_IO_SETUP, 1, ctypes.byref(ctx)) < 0:
        fail(f'io_setup: {os.strerror(ctypes.get_errno())}')
    try:
        iocb = ctypes.create_string_buffer(struct.pack(
            '<QIiHhIQQqQII', 0, 0, 0, IOCB_CMD_PWRITE, 0, fd, buf_addr, size, 0, 0, 0, 0))
        ptrs = (ctypes.c_void_p * 1)(ctypes.addressof(iocb))
        if libc.syscall(SYS_IO_SUBMIT, ctx, 1, ptrs) != 1:
            fail(f'io_submit: {os.strerror(ctypes.get_errno())}')
        ev = ctypes.create_string_buffer(32)
        if libc.syscall(SYS_IO_GETEVENTS, ctx, 1, 1, ev, None) != 1:
            fail(f'io_getevents: {os.strerror(ctypes.get_errno())}')
        return struct.unpack('<QQqq', ev.raw)[2]
    finally:
        libc.syscall(SYS_IO_DESTROY, ctx)


def main(layer, pages, size):
    buf = mmap.mmap(-1, size)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    for i in range(pages):
        for off in range(0, size, MIB):     # every MiB its own pattern
            buf[off:off + MIB] = bytes([(i * 31 + off // MIB) % 251 + 1]) * MIB
        path = os.path.join(layer, f'aio{i}')
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
        res = aio_pwrite(fd, addr, size)
        os.close(fd)
        if res != size:
            fail(f'page {i}: the AIO write returned {res}, want {size}')
        with open(path, 'rb') as f:
            got = f.read()
        if got != buf[:size]:
            bad = next(k for k in range(0, size, MIB) if got[k:k + MIB] != buf[k:k + MIB])
            fail(f'page {i} of {size} bytes read back wrong (first bad MiB at {bad}, '
                 f'{len(got)} bytes read)')
    print(f'{pages} pages of {size >> 20} MiB written by one AIO O_DIRECT write each, '
          f'read back exactly')


if __name__ == '__main__':
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) * MIB)
