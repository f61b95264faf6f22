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

// recvNow reads what fd holds without waiting (recvfrom with MSG_DONTWAIT): for a socket in
// the sockmap, the bytes the program passed to it.
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
