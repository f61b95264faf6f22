package router

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// splice, epollPoll and closeFD are the loop's system calls. None of them ever blocks (the
// descriptors are non-blocking, the epoll wait has no timeout), so they are made raw: the
// runtime is not told, and sysmon never hands the loop's processor to another thread in
// the middle of one, which on a 2-core machine cost more context switches than the calls.
func splice(rfd, wfd, n int) (int64, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(rfd), 0, uintptr(wfd), 0, uintptr(n), spliceFlag)
	if e != 0 {
		return 0, e
	}
	return int64(r), nil
}

func epollPoll(epfd int, events []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func closeFD(fd int) {
	unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

// The set-up's system calls (loop_setup_linux.go) are raw too, for the same reason, and one more:
// a call the runtime is told of (entersyscall) wakes sysmon from its deep sleep when every P
// was idle, and a woken sysmon polls every 20 µs for a millisecond: on a machine that waits
// between connections, tens of context switches per connection. None of these blocks.

func rawSocket(family, typ int) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), uintptr(typ), 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func rawSetsockoptInt(fd, level, opt, v int) error {
	val := int32(v)
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&val)), 4, 0)
	if e != 0 {
		return e
	}
	return nil
}

func rawGetsockoptInt(fd, level, opt int) (int, error) {
	var val int32
	n := uint32(4)
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&val)), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return 0, e
	}
	return int(val), nil
}

func rawSetLinger0(fd int) {
	l := unix.Linger{Onoff: 1, Linger: 0}
	unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER, uintptr(unsafe.Pointer(&l)), unsafe.Sizeof(l), 0)
}

func rawEpollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func rawShutdownWrite(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), unix.SHUT_WR, 0)
	if e != 0 {
		return e
	}
	return nil
}

// recvNow reads what fd holds without waiting (recvfrom with MSG_DONTWAIT): a set-up's
// client bytes and proxy answers, or for a socket in the sockmap the bytes the program
// passed to it. It returns 0 with the error when nothing was read.
func recvNow(fd int, buf []byte) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// writeAll writes b to the non-blocking fd, which must have room for it (an empty pipe).
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch {
		case e == unix.EINTR:
			continue
		case e != 0:
			return e
		case r == 0:
			return errShortPipeWrite
		}
		b = b[r:]
	}
	return nil
}
