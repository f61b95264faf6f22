//go:build windows

package wfp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"syscall"

	"github.com/tailscale/wf"
	"golang.org/x/sys/windows"
)

// NewEngine returns Windows' Base Filtering Engine. Sessions go through
// github.com/tailscale/wf (engine open/close, providers, sublayers, filters with their
// conditions, app IDs) and, for what that package does not offer, through our own calls
// into fwpuclnt.dll on the same engine handle (native_windows.go):
//   - transactions: wf has no Begin/Commit/Abort, yet the guard must swap its filters
//     atomically (no window between deleting the old blocks and adding the new ones);
//   - listing one provider's filters: wf.Session.Rules enumerates and parses every filter
//     of the machine (Windows Firewall has thousands; one condition type wf cannot parse
//     fails the whole list), and its FWPM_FILTER0 mirror reads the union after the
//     action as two fields (208 bytes for the SDK's 200), so the filter ID and effective
//     weight it reads back are wrong. We enumerate per layer with a template naming our
//     provider and read only the fixed part (layout checked against the SDK in
//     layout_windows_test.go).
//
// wf keeps the engine handle unexported; engineHandle reads it by reflection (read-only,
// no unsafe), and a test fails if a new wf version moves it.
func NewEngine() Engine { return winEngine{} }

type winEngine struct{}

type winSession struct {
	s      *wf.Session
	h      windows.Handle
	closed bool
}

func (winEngine) Open(o SessionOptions) (Session, error) {
	s, err := wf.New(&wf.Options{Name: o.Name, Description: "router", Dynamic: o.Dynamic, TransactionStartTimeout: o.TxnTimeout})
	if err != nil {
		return nil, fmt.Errorf("open filtering engine session: %w", codeOf(err))
	}
	h, err := engineHandle(s)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open filtering engine session: %w", err)
	}
	return &winSession{s: s, h: h}, nil
}

func (winEngine) AppID(path string) (string, error) {
	id, err := wf.AppID(path)
	if err != nil {
		return "", fmt.Errorf("app id of %s: %w", path, codeOf(err))
	}
	return id, nil
}

// engineHandle returns the FWPM engine handle wf.Session holds in its unexported field
// "handle".
func engineHandle(s *wf.Session) (windows.Handle, error) {
	v := reflect.ValueOf(s).Elem().FieldByName("handle")
	if !v.IsValid() || v.Kind() != reflect.Uintptr {
		return 0, errors.New("github.com/tailscale/wf: Session has no handle field (version changed?)")
	}
	return windows.Handle(v.Uint()), nil
}

// codeOf turns a Windows error number into a Code.
func codeOf(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return Code(errno)
	}
	return err
}

func (w *winSession) usable() error {
	if w.closed {
		return CodeInvalidHandle
	}
	return nil
}

func (w *winSession) Begin() error {
	if err := w.usable(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	return wrap("begin transaction", fwpmTransactionBegin0(w.h, 0))
}

func (w *winSession) Commit() error {
	if err := w.usable(); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return wrap("commit transaction", fwpmTransactionCommit0(w.h))
}

func (w *winSession) Abort() error {
	if err := w.usable(); err != nil {
		return fmt.Errorf("abort transaction: %w", err)
	}
	return wrap("abort transaction", fwpmTransactionAbort0(w.h))
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, codeOf(err))
}

// guid converts a Key (RFC 4122 byte order) to a Windows GUID (little-endian fields).
func guid(k Key) windows.GUID {
	var g windows.GUID
	g.Data1 = binary.BigEndian.Uint32(k[0:4])
	g.Data2 = binary.BigEndian.Uint16(k[4:6])
	g.Data3 = binary.BigEndian.Uint16(k[6:8])
	copy(g.Data4[:], k[8:])
	return g
}

func keyOf(g windows.GUID) Key {
	var k Key
	binary.BigEndian.PutUint32(k[0:4], g.Data1)
	binary.BigEndian.PutUint16(k[4:6], g.Data2)
	binary.BigEndian.PutUint16(k[6:8], g.Data3)
	copy(k[8:], g.Data4[:])
	return k
}

func (w *winSession) AddProvider(p Provider) error {
	if err := w.usable(); err != nil {
		return fmt.Errorf("add provider: %w", err)
	}
	return wrap("add provider "+p.Key.String(), w.s.AddProvider(&wf.Provider{ID: wf.ProviderID(guid(p.Key)), Name: p.Name, Persistent: p.Persistent}))
}

func (w *winSession) DeleteProvider(k Key) error {
	if err := w.usable(); err != nil {
		return fmt.Errorf("delete provider: %w", err)
	}
	return wrap("delete provider "+k.String(), w.s.DeleteProvider(wf.ProviderID(guid(k))))
}

func (w *winSession) Provider(k Key) (Provider, error) {
	if err := w.usable(); err != nil {
		return Provider{}, fmt.Errorf("get provider: %w", err)
	}
	ps, err := w.s.Providers()
	if err != nil {
		return Provider{}, wrap("list providers", err)
	}
	for _, p := range ps {
		if keyOf(windows.GUID(p.ID)) == k {
			return Provider{Key: k, Name: p.Name, Persistent: p.Persistent}, nil
		}
	}
	return Provider{}, fmt.Errorf("get provider %v: %w", k, CodeProviderNotFound)
}

func (w *winSession) AddSublayer(s Sublayer) error {
	if err := w.usable(); err != nil {
		return fmt.Errorf("add sublayer: %w", err)
	}
	return wrap("add sublayer "+s.Key.String(), w.s.AddSublayer(&wf.Sublayer{
		ID: wf.SublayerID(guid(s.Key)), Name: s.Name, Provider: wf.ProviderID(guid(s.Provider)), Weight: s.Weight, Persistent: s.Persistent,
	}))
}

func (w *winSession) DeleteSublayer(k Key) error {
	if err := w.usable(); err != nil {
		return fmt.Errorf("delete sublayer: %w", err)
	}
	return wrap("delete sublayer "+k.String(), w.s.DeleteSublayer(wf.SublayerID(guid(k))))
}

func (w *winSession) Sublayer(k Key) (Sublayer, error) {
	if err := w.usable(); err != nil {
		return Sublayer{}, fmt.Errorf("get sublayer: %w", err)
	}
	ss, err := w.s.Sublayers()
	if err != nil {
		return Sublayer{}, wrap("list sublayers", err)
	}
	for _, s := range ss {
		if keyOf(windows.GUID(s.ID)) == k {
			return Sublayer{Key: k, Provider: keyOf(windows.GUID(s.Provider)), Name: s.Name, Weight: s.Weight, Persistent: s.Persistent}, nil
		}
	}
	return Sublayer{}, fmt.Errorf("get sublayer %v: %w", k, CodeSublayerNotFound)
}

var layerIDs = map[Layer]wf.LayerID{
	LayerConnectV4: wf.LayerALEAuthConnectV4,
	LayerConnectV6: wf.LayerALEAuthConnectV6,
	LayerAcceptV4:  wf.LayerALEAuthRecvAcceptV4,
	LayerAcceptV6:  wf.LayerALEAuthRecvAcceptV6,
	LayerForwardV4: wf.LayerIPForwardV4,
	LayerForwardV6: wf.LayerIPForwardV6,
}

func (w *winSession) AddFilter(f Filter) error {
	what := fmt.Sprintf("add filter %q", f.Name)
	if err := w.usable(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r := &wf.Rule{
		ID:           wf.RuleID(guid(f.Key)),
		Name:         f.Name,
		Layer:        layerIDs[f.Layer],
		Sublayer:     wf.SublayerID(guid(f.Sublayer)),
		Weight:       f.Weight,
		Action:       wf.ActionBlock,
		HardAction:   f.Hard,
		Persistent:   f.Persistent,
		BootTime:     f.BootTime,
		Provider:     wf.ProviderID(guid(f.Provider)),
		ProviderData: f.Digest,
	}
	if f.Action == Permit {
		r.Action = wf.ActionPermit
	}
	for _, c := range f.Conditions {
		m, err := match(c)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		r.Conditions = append(r.Conditions, m)
	}
	return wrap(what, w.s.AddRule(r))
}

// match turns a condition into wf's form.
func match(c Condition) (*wf.Match, error) {
	switch c.Field {
	case FieldApp:
		id, err := wf.AppID(c.Path)
		if err != nil {
			return nil, fmt.Errorf("app id of %s: %w", c.Path, codeOf(err))
		}
		return &wf.Match{Field: wf.FieldALEAppID, Op: wf.MatchTypeEqual, Value: id}, nil
	case FieldUser:
		// The engine grants the match when the token passes an access check against this
		// descriptor for FWP_ACTRL_MATCH_FILTER (0x1, "CC" in SDDL).
		sd, err := windows.SecurityDescriptorFromString("O:SYD:(A;;CC;;;" + c.SID + ")")
		if err != nil {
			return nil, fmt.Errorf("security descriptor for %s: %w", c.SID, err)
		}
		return &wf.Match{Field: wf.FieldALEUserID, Op: wf.MatchTypeEqual, Value: sd}, nil
	case FieldProtocol:
		return &wf.Match{Field: wf.FieldIPProtocol, Op: wf.MatchTypeEqual, Value: c.Proto}, nil
	case FieldLocalPort, FieldRemotePort:
		field := wf.FieldIPLocalPort
		if c.Field == FieldRemotePort {
			field = wf.FieldIPRemotePort
		}
		if c.Ports.From == c.Ports.To {
			return &wf.Match{Field: field, Op: wf.MatchTypeEqual, Value: c.Ports.From}, nil
		}
		return &wf.Match{Field: field, Op: wf.MatchTypeRange, Value: wf.Range{From: c.Ports.From, To: c.Ports.To}}, nil
	case FieldLocalAddr:
		return &wf.Match{Field: wf.FieldIPLocalAddress, Op: wf.MatchTypeEqual, Value: c.Prefix}, nil
	case FieldRemoteAddr:
		return &wf.Match{Field: wf.FieldIPRemoteAddress, Op: wf.MatchTypeEqual, Value: c.Prefix}, nil
	case FieldSourceAddr:
		return &wf.Match{Field: wf.FieldIPSourceAddress, Op: wf.MatchTypeEqual, Value: c.Prefix}, nil
	case FieldFlags:
		op := wf.MatchTypeFlagsAllSet
		if c.None {
			op = wf.MatchTypeFlagsNoneSet
		}
		return &wf.Match{Field: wf.FieldFlags, Op: op, Value: wf.ConditionFlag(c.Flags)}, nil
	case FieldInterface:
		return &wf.Match{Field: wf.FieldIPLocalInterface, Op: wf.MatchTypeEqual, Value: c.LUID}, nil
	}
	return nil, fmt.Errorf("condition %v: unknown field", c)
}

func (w *winSession) DeleteFilter(k Key) error {
	if err := w.usable(); err != nil {
		return fmt.Errorf("delete filter: %w", err)
	}
	return wrap("delete filter "+k.String(), w.s.DeleteRule(wf.RuleID(guid(k))))
}

func (w *winSession) Filters(provider Key) ([]Filter, error) {
	if err := w.usable(); err != nil {
		return nil, fmt.Errorf("list filters: %w", err)
	}
	var out []Filter
	for l := LayerConnectV4; l <= LayerForwardV6; l++ {
		p := guid(provider)
		fs, err := enumFilters(w.h, &p, windows.GUID(layerIDs[l]))
		if err != nil {
			return nil, fmt.Errorf("list filters at %v: %w", l, codeOf(err))
		}
		for i := range fs {
			fs[i].Layer = l
		}
		out = append(out, fs...)
	}
	return out, nil
}

func (w *winSession) AllSublayers() ([]Sublayer, error) {
	if err := w.usable(); err != nil {
		return nil, fmt.Errorf("list sublayers: %w", err)
	}
	ss, err := w.s.Sublayers()
	if err != nil {
		return nil, wrap("list sublayers", err)
	}
	out := make([]Sublayer, 0, len(ss))
	for _, s := range ss {
		out = append(out, Sublayer{Key: keyOf(windows.GUID(s.ID)), Provider: keyOf(windows.GUID(s.Provider)), Name: s.Name, Weight: s.Weight, Persistent: s.Persistent})
	}
	return out, nil
}

func (w *winSession) LayerFilters(l Layer) ([]Filter, error) {
	if err := w.usable(); err != nil {
		return nil, fmt.Errorf("list filters: %w", err)
	}
	id, ok := layerIDs[l]
	if !ok {
		return nil, fmt.Errorf("list filters: invalid %v", l)
	}
	fs, err := enumFilters(w.h, nil, windows.GUID(id))
	if err != nil {
		return nil, fmt.Errorf("list filters at %v: %w", l, codeOf(err))
	}
	for i := range fs {
		fs[i].Layer = l
	}
	return fs, nil
}

func (w *winSession) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	return wrap("close filtering engine session", w.s.Close())
}
