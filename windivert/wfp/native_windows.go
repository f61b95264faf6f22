//go:build windows

package wfp

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Our mirrors of the fwpmtypes.h structures we read or pass ourselves, for 64-bit
// Windows; layout_windows_test.go checks every size and offset against the SDK's.

// FWP_BYTE_BLOB
type fwpByteBlob struct {
	size uint32
	data *byte
}

// FWPM_DISPLAY_DATA0
type fwpmDisplayData0 struct {
	name        *uint16
	description *uint16
}

// FWP_VALUE0 and FWP_CONDITION_VALUE0: a type and an 8-byte union (small integers in
// place, everything else through a pointer).
type fwpValue0 struct {
	typ   uint32
	value unsafe.Pointer
}

// FWPM_ACTION0
type fwpmAction0 struct {
	typ        uint32
	filterType windows.GUID // or calloutKey
}

// FWPM_FILTER_CONDITION0
type fwpmFilterCondition0 struct {
	_              windows.GUID // fieldKey: the engine reads it, Go never does
	matchType      uint32
	conditionValue fwpValue0
}

// FWPM_FILTER0
type fwpmFilter0 struct {
	filterKey           windows.GUID
	displayData         fwpmDisplayData0
	flags               uint32
	providerKey         *windows.GUID
	providerData        fwpByteBlob
	layerKey            windows.GUID
	subLayerKey         windows.GUID
	weight              fwpValue0
	numFilterConditions uint32
	filterCondition     *fwpmFilterCondition0
	action              fwpmAction0
	context             [2]uint64 // union { UINT64 rawContext; GUID providerContextKey; }
	reserved            *windows.GUID
	filterID            uint64
	effectiveWeight     fwpValue0
}

// FWPM_FILTER_ENUM_TEMPLATE0
type fwpmFilterEnumTemplate0 struct {
	providerKey             *windows.GUID
	layerKey                windows.GUID
	enumType                uint32
	flags                   uint32
	providerContextTemplate unsafe.Pointer
	numFilterConditions     uint32
	filterCondition         *fwpmFilterCondition0
	actionMask              uint32
	calloutKey              *windows.GUID
}

// Constants of fwpmtypes.h / fwptypes.h.
const (
	fwpmFilterFlagPersistent       = 0x1
	fwpmFilterFlagBootTime         = 0x2
	fwpmFilterFlagClearActionRight = 0x8
	fwpFilterEnumOverlapping       = 1
	fwpFilterEnumFlagIncludeBoot   = 0x8
	fwpActionBlock                 = 0x1001
	fwpActionPermit                = 0x1002
	fwpUint8                       = 1
	fwpUint64                      = 4
)

var (
	modfwpuclnt                      = windows.NewLazySystemDLL("fwpuclnt.dll")
	procFwpmEngineOpen0              = modfwpuclnt.NewProc("FwpmEngineOpen0")
	procFwpmTransactionBegin0        = modfwpuclnt.NewProc("FwpmTransactionBegin0")
	procFwpmTransactionCommit0       = modfwpuclnt.NewProc("FwpmTransactionCommit0")
	procFwpmTransactionAbort0        = modfwpuclnt.NewProc("FwpmTransactionAbort0")
	procFwpmFilterCreateEnumHandle0  = modfwpuclnt.NewProc("FwpmFilterCreateEnumHandle0")
	procFwpmFilterEnum0              = modfwpuclnt.NewProc("FwpmFilterEnum0")
	procFwpmFilterDestroyEnumHandle0 = modfwpuclnt.NewProc("FwpmFilterDestroyEnumHandle0")
	procFwpmFreeMemory0              = modfwpuclnt.NewProc("FwpmFreeMemory0")
)

// call calls p and turns a non-zero DWORD result into a syscall.Errno.
func call(p *windows.LazyProc, args ...uintptr) error {
	if err := p.Find(); err != nil {
		return err
	}
	r, _, _ := p.Call(args...)
	if r != 0 {
		return syscall.Errno(r)
	}
	return nil
}

func fwpmTransactionBegin0(h windows.Handle, flags uint32) error {
	return call(procFwpmTransactionBegin0, uintptr(h), uintptr(flags))
}

func fwpmTransactionCommit0(h windows.Handle) error {
	return call(procFwpmTransactionCommit0, uintptr(h))
}

func fwpmTransactionAbort0(h windows.Handle) error {
	return call(procFwpmTransactionAbort0, uintptr(h))
}

// enumFilters lists the filters of provider (nil: of every provider) at layer (boot-time
// ones included), reading the fixed part of each FWPM_FILTER0 (not the conditions).
func enumFilters(h windows.Handle, provider *windows.GUID, layer windows.GUID) ([]Filter, error) {
	var pin runtime.Pinner
	defer pin.Unpin()
	if provider != nil {
		pin.Pin(provider)
	}
	tpl := fwpmFilterEnumTemplate0{
		providerKey: provider,
		layerKey:    layer,
		enumType:    fwpFilterEnumOverlapping,
		flags:       fwpFilterEnumFlagIncludeBoot,
		actionMask:  0xFFFFFFFF,
	}
	var enum windows.Handle
	if err := call(procFwpmFilterCreateEnumHandle0, uintptr(h), uintptr(unsafe.Pointer(&tpl)), uintptr(unsafe.Pointer(&enum))); err != nil {
		return nil, err
	}
	defer call(procFwpmFilterDestroyEnumHandle0, uintptr(h), uintptr(enum))
	var out []Filter
	for range 10000 { // 100 per page: a bound far above what a layer holds
		var entries **fwpmFilter0
		var n uint32
		if err := call(procFwpmFilterEnum0, uintptr(h), uintptr(enum), 100, uintptr(unsafe.Pointer(&entries)), uintptr(unsafe.Pointer(&n))); err != nil {
			return nil, err
		}
		if n == 0 || entries == nil {
			return out, nil
		}
		for _, f := range unsafe.Slice(entries, n) {
			out = append(out, fromFilter0(f))
		}
		procFwpmFreeMemory0.Call(uintptr(unsafe.Pointer(&entries)))
	}
	return out, nil
}

// fromFilter0 copies what the guard needs out of f (memory the engine owns).
func fromFilter0(f *fwpmFilter0) Filter {
	out := Filter{
		Key:        keyOf(f.filterKey),
		Name:       windows.UTF16PtrToString(f.displayData.name),
		Sublayer:   keyOf(f.subLayerKey),
		Hard:       f.flags&fwpmFilterFlagClearActionRight != 0,
		Persistent: f.flags&fwpmFilterFlagPersistent != 0,
		BootTime:   f.flags&fwpmFilterFlagBootTime != 0,
	}
	if f.providerKey != nil {
		out.Provider = keyOf(*f.providerKey)
	}
	if f.providerData.size > 0 && f.providerData.data != nil {
		out.Digest = append([]byte(nil), unsafe.Slice(f.providerData.data, f.providerData.size)...)
	}
	switch f.weight.typ {
	case fwpUint8:
		out.Weight = uint64(*(*uint8)(unsafe.Pointer(&f.weight.value)))
	case fwpUint64:
		if f.weight.value != nil {
			out.Weight = *(*uint64)(f.weight.value)
		}
	}
	switch f.action.typ {
	case fwpActionBlock:
		out.Action = Block
	case fwpActionPermit:
		out.Action = Permit
	}
	return out
}
