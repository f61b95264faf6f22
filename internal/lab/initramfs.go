package lab

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// CPIOEntry is one member of an initramfs: a directory, a regular file or a character
// device, by Mode (fs.ModeDir, 0 or fs.ModeCharDevice|fs.ModeDevice, with the permission
// bits). Name is the path inside the archive without a leading slash ("bin/busybox").
// Major and Minor are the device numbers of a character device.
type CPIOEntry struct {
	Name         string
	Mode         fs.FileMode
	Data         []byte
	Major, Minor uint32
}

// newc mode bits (the st_mode of the archived file).
const (
	cpioModeDir  = 0o040000
	cpioModeFile = 0o100000
	cpioModeChar = 0o020000
)

// WriteInitramfs writes entries to w as an uncompressed newc ("070701") cpio archive, the
// format the Linux kernel unpacks as its initramfs, ending with the TRAILER!!! member.
// Entries are written in the order given: a directory must come before what it holds.
func WriteInitramfs(w io.Writer, entries []CPIOEntry) error {
	bw := bufio.NewWriter(w)
	ino := uint32(1)
	for _, e := range entries {
		name := strings.TrimPrefix(path.Clean(e.Name), "/")
		if name == "" || name == "." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("initramfs: bad member name %q", e.Name)
		}
		mode := uint32(e.Mode.Perm())
		switch {
		case e.Mode.IsDir():
			mode |= cpioModeDir
		case e.Mode&fs.ModeCharDevice != 0:
			mode |= cpioModeChar
		case e.Mode.IsRegular():
			mode |= cpioModeFile
		default:
			return fmt.Errorf("initramfs: %s: mode %v is not a directory, file or character device", name, e.Mode)
		}
		if e.Data != nil && !e.Mode.IsRegular() {
			return fmt.Errorf("initramfs: %s: data on a member that is not a regular file", name)
		}
		nlink := uint32(1)
		if e.Mode.IsDir() {
			nlink = 2
		}
		if err := writeCPIOMember(bw, ino, mode, nlink, e.Major, e.Minor, name, e.Data); err != nil {
			return fmt.Errorf("initramfs: %s: %w", name, err)
		}
		ino++
	}
	if err := writeCPIOMember(bw, 0, 0, 1, 0, 0, "TRAILER!!!", nil); err != nil {
		return fmt.Errorf("initramfs: trailer: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return nil
}

// writeCPIOMember writes one newc header, the name and the data, each padded to 4 bytes.
func writeCPIOMember(w *bufio.Writer, ino, mode, nlink, rmajor, rminor uint32, name string, data []byte) error {
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor,
	// rdevminor, namesize (with its NUL), check.
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	if _, err := w.WriteString(hdr); err != nil {
		return err
	}
	if _, err := w.WriteString(name + "\x00"); err != nil {
		return err
	}
	if err := cpioPad(w, len(hdr)+len(name)+1); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	return cpioPad(w, len(data))
}

func cpioPad(w *bufio.Writer, n int) error {
	_, err := w.Write(make([]byte, (4-n%4)%4))
	return err
}
