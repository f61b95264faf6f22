// Package wfp is a small, platform-neutral model of the Windows Filtering Platform objects
// the router's guard uses (providers, sublayers, filters with their conditions) and the
// API it needs from a filtering engine: sessions (static or dynamic), transactions, add and
// delete by key, and the list of a provider's filters.
//
// The real engine is Windows' Base Filtering Engine, reached through
// github.com/tailscale/wf plus a few direct fwpuclnt.dll calls that package does not
// expose (see wfp_windows.go: NewEngine). wfptest holds an in-memory engine with Windows'
// arbitration, sessions, lifetimes and reboot, so the guard's logic is tested on any OS.
//
// WFP rules this model keeps (and the fake enforces):
//   - A filter's conditions on the same field are OR-ed, conditions on different fields
//     AND-ed; a filter without conditions matches everything at its layer.
//   - Within a sublayer the matching filter of highest weight decides. Across sublayers,
//     evaluated from the highest sublayer weight down, a block is final and overrides
//     earlier permits unless one of those permits was hard (Hard: the filter cleared the
//     action write right, FWPM_FILTER_FLAG_CLEAR_ACTION_RIGHT). Nothing matching: permit.
//   - Lifetimes: a persistent object survives its session, the engine's restart and a
//     reboot; a boot-time filter is enforced from the network stack's start until the
//     engine (BFE) has started, and is stored across reboots; any other object lives as
//     long as its dynamic session, or, added by a static session, until the engine stops.
//     A persistent or boot-time object may only name persistent providers and sublayers,
//     and a dynamic session cannot add persistent or boot-time objects.
package wfp
