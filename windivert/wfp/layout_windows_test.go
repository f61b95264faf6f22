//go:build windows && amd64

package wfp

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Mirrors used only here, for the structures wf passes for us: their layout is what wf's
// copies must have too (wf keeps them unexported; see wfp_windows.go for the FWPM_FILTER0
// it gets wrong).

// FWPM_SUBLAYER0
type fwpmSublayer0 struct {
	_            windows.GUID // subLayerKey
	displayData  fwpmDisplayData0
	flags        uint32
	providerKey  *windows.GUID
	providerData fwpByteBlob
	weight       uint16
}

// FWPM_PROVIDER0
type fwpmProvider0 struct {
	_            windows.GUID // providerKey
	displayData  fwpmDisplayData0
	flags        uint32
	providerData fwpByteBlob
	serviceName  *uint16
}

// FWPM_SESSION0
type fwpmSession0 struct {
	_                    windows.GUID // sessionKey
	displayData          fwpmDisplayData0
	flags                uint32
	txnWaitTimeoutInMSec uint32
	processID            uint32
	sid                  *windows.SID
	username             *uint16
	kernelMode           int32
}

// TestLayout checks our mirrors against the Windows SDK's definitions. The numbers are
// what testdata/layout.c prints when built against the SDK headers (mingw-w64's here:
// x86_64-w64-mingw32-gcc -o layout.exe testdata/layout.c && wine layout.exe).
func TestLayout(t *testing.T) {
	var (
		f   fwpmFilter0
		c   fwpmFilterCondition0
		v   fwpValue0
		a   fwpmAction0
		b   fwpByteBlob
		d   fwpmDisplayData0
		tpl fwpmFilterEnumTemplate0
		sl  fwpmSublayer0
		p   fwpmProvider0
		s   fwpmSession0
	)
	checks := []struct {
		name      string
		got, want uintptr
	}{
		{"FWP_BYTE_BLOB size", unsafe.Sizeof(b), 16},
		{"FWP_BYTE_BLOB.data", unsafe.Offsetof(b.data), 8},
		{"FWPM_DISPLAY_DATA0 size", unsafe.Sizeof(d), 16},
		{"FWPM_DISPLAY_DATA0.description", unsafe.Offsetof(d.description), 8},
		{"FWP_VALUE0 size (and FWP_CONDITION_VALUE0)", unsafe.Sizeof(v), 16},
		{"FWP_VALUE0 union", unsafe.Offsetof(v.value), 8},
		{"FWPM_ACTION0 size", unsafe.Sizeof(a), 20},
		{"FWPM_ACTION0.filterType", unsafe.Offsetof(a.filterType), 4},
		{"FWPM_FILTER_CONDITION0 size", unsafe.Sizeof(c), 40},
		{"FWPM_FILTER_CONDITION0.matchType", unsafe.Offsetof(c.matchType), 16},
		{"FWPM_FILTER_CONDITION0.conditionValue", unsafe.Offsetof(c.conditionValue), 24},
		{"FWPM_FILTER0 size", unsafe.Sizeof(f), 200},
		{"FWPM_FILTER0.displayData", unsafe.Offsetof(f.displayData), 16},
		{"FWPM_FILTER0.flags", unsafe.Offsetof(f.flags), 32},
		{"FWPM_FILTER0.providerKey", unsafe.Offsetof(f.providerKey), 40},
		{"FWPM_FILTER0.providerData", unsafe.Offsetof(f.providerData), 48},
		{"FWPM_FILTER0.layerKey", unsafe.Offsetof(f.layerKey), 64},
		{"FWPM_FILTER0.subLayerKey", unsafe.Offsetof(f.subLayerKey), 80},
		{"FWPM_FILTER0.weight", unsafe.Offsetof(f.weight), 96},
		{"FWPM_FILTER0.numFilterConditions", unsafe.Offsetof(f.numFilterConditions), 112},
		{"FWPM_FILTER0.filterCondition", unsafe.Offsetof(f.filterCondition), 120},
		{"FWPM_FILTER0.action", unsafe.Offsetof(f.action), 128},
		{"FWPM_FILTER0.rawContext", unsafe.Offsetof(f.context), 152},
		{"FWPM_FILTER0.reserved", unsafe.Offsetof(f.reserved), 168},
		{"FWPM_FILTER0.filterId", unsafe.Offsetof(f.filterID), 176},
		{"FWPM_FILTER0.effectiveWeight", unsafe.Offsetof(f.effectiveWeight), 184},
		{"FWPM_FILTER_ENUM_TEMPLATE0 size", unsafe.Sizeof(tpl), 72},
		{"FWPM_FILTER_ENUM_TEMPLATE0.layerKey", unsafe.Offsetof(tpl.layerKey), 8},
		{"FWPM_FILTER_ENUM_TEMPLATE0.enumType", unsafe.Offsetof(tpl.enumType), 24},
		{"FWPM_FILTER_ENUM_TEMPLATE0.flags", unsafe.Offsetof(tpl.flags), 28},
		{"FWPM_FILTER_ENUM_TEMPLATE0.providerContextTemplate", unsafe.Offsetof(tpl.providerContextTemplate), 32},
		{"FWPM_FILTER_ENUM_TEMPLATE0.numFilterConditions", unsafe.Offsetof(tpl.numFilterConditions), 40},
		{"FWPM_FILTER_ENUM_TEMPLATE0.filterCondition", unsafe.Offsetof(tpl.filterCondition), 48},
		{"FWPM_FILTER_ENUM_TEMPLATE0.actionMask", unsafe.Offsetof(tpl.actionMask), 56},
		{"FWPM_FILTER_ENUM_TEMPLATE0.calloutKey", unsafe.Offsetof(tpl.calloutKey), 64},
		{"FWPM_SUBLAYER0 size", unsafe.Sizeof(sl), 72},
		{"FWPM_SUBLAYER0.displayData", unsafe.Offsetof(sl.displayData), 16},
		{"FWPM_SUBLAYER0.flags", unsafe.Offsetof(sl.flags), 32},
		{"FWPM_SUBLAYER0.providerKey", unsafe.Offsetof(sl.providerKey), 40},
		{"FWPM_SUBLAYER0.providerData", unsafe.Offsetof(sl.providerData), 48},
		{"FWPM_SUBLAYER0.weight", unsafe.Offsetof(sl.weight), 64},
		{"FWPM_PROVIDER0 size", unsafe.Sizeof(p), 64},
		{"FWPM_PROVIDER0.displayData", unsafe.Offsetof(p.displayData), 16},
		{"FWPM_PROVIDER0.flags", unsafe.Offsetof(p.flags), 32},
		{"FWPM_PROVIDER0.providerData", unsafe.Offsetof(p.providerData), 40},
		{"FWPM_PROVIDER0.serviceName", unsafe.Offsetof(p.serviceName), 56},
		{"FWPM_SESSION0 size", unsafe.Sizeof(s), 72},
		{"FWPM_SESSION0.displayData", unsafe.Offsetof(s.displayData), 16},
		{"FWPM_SESSION0.flags", unsafe.Offsetof(s.flags), 32},
		{"FWPM_SESSION0.txnWaitTimeoutInMSec", unsafe.Offsetof(s.txnWaitTimeoutInMSec), 36},
		{"FWPM_SESSION0.processId", unsafe.Offsetof(s.processID), 40},
		{"FWPM_SESSION0.sid", unsafe.Offsetof(s.sid), 48},
		{"FWPM_SESSION0.username", unsafe.Offsetof(s.username), 56},
		{"FWPM_SESSION0.kernelMode", unsafe.Offsetof(s.kernelMode), 64},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d, SDK %d", c.name, c.got, c.want)
		}
	}
}
