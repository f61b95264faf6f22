package cagemark

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// layout is where the program finds, from a task, the name of the executable it runs and
// its parent: byte offsets in the running kernel's structures, read from its BTF
// (/sys/kernel/btf/vmlinux), so that the program needs no headers of a kernel version.
type layout struct {
	taskMM     int16 // task_struct.mm: the address space every thread of a process shares
	taskParent int16 // task_struct.real_parent: the process that forked it
	mmExe      int16 // mm_struct.exe_file: the file the process executed (what /proc/PID/exe shows)
	fileDentry int16 // file.f_path.dentry
	dentryName int16 // dentry.d_name.name: the file's name, NUL-terminated
	taskTgid   int16 // task_struct.tgid: the process's ID
	taskLeader int16 // task_struct.group_leader: the process's first thread
	taskStart  int16 // task_struct.start_time: when it started (ns), which with tgid is unique
}

// kernelLayout reads the running kernel's layout from spec (nil: the kernel's BTF).
func kernelLayout(spec *btf.Spec) (layout, error) {
	if spec == nil {
		var err error
		if spec, err = btf.LoadKernelSpec(); err != nil {
			return layout{}, fmt.Errorf("kernel btf: %w", err)
		}
	}
	var l layout
	for _, f := range []struct {
		dst          *int16
		typ, members string
	}{
		{&l.taskMM, "task_struct", "mm"},
		{&l.taskParent, "task_struct", "real_parent"},
		{&l.mmExe, "mm_struct", "exe_file"},
		{&l.fileDentry, "file", "f_path.dentry"},
		{&l.dentryName, "dentry", "d_name.name"},
		{&l.taskTgid, "task_struct", "tgid"},
		{&l.taskLeader, "task_struct", "group_leader"},
		{&l.taskStart, "task_struct", "start_time"},
	} {
		off, err := offsetOf(spec, f.typ, f.members)
		if err != nil {
			return layout{}, fmt.Errorf("kernel btf: %w", err)
		}
		if off > 1<<15-8 {
			return layout{}, fmt.Errorf("kernel btf: %s.%s at %d: too far", f.typ, f.members, off)
		}
		*f.dst = int16(off)
	}
	return l, nil
}

// offsetOf returns the byte offset of the member path (dotted, through embedded structs,
// not pointers) in the struct typ; members of anonymous structs and unions are found as the
// compiler finds them.
func offsetOf(spec *btf.Spec, typ, path string) (uint32, error) {
	var s *btf.Struct
	if err := spec.TypeByName(typ, &s); err != nil {
		return 0, fmt.Errorf("struct %s: %w", typ, err)
	}
	var t btf.Type = s
	var off uint32
	for _, name := range strings.Split(path, ".") {
		m, at, ok := member(t, name)
		if !ok {
			return 0, fmt.Errorf("struct %s has no %s", typ, path)
		}
		if m.BitfieldSize != 0 || at%8 != 0 {
			return 0, fmt.Errorf("struct %s: %s is a bit field", typ, path)
		}
		off += uint32(at / 8)
		t = m.Type
	}
	return off, nil
}

// member finds name among t's members and those of its anonymous members, with its offset
// in bits from t's start.
func member(t btf.Type, name string) (btf.Member, btf.Bits, bool) {
	var ms []btf.Member
	switch c := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		ms = c.Members
	case *btf.Union:
		ms = c.Members
	default:
		return btf.Member{}, 0, false
	}
	for _, m := range ms {
		if m.Name == name {
			return m, m.Offset, true
		}
	}
	for _, m := range ms {
		if m.Name == "" {
			if in, at, ok := member(m.Type, name); ok {
				return in, m.Offset + at, true
			}
		}
	}
	return btf.Member{}, 0, false
}
