package redirect

import (
	"math/rand/v2"
	"net/netip"
)

// mapLocked gives the reflected flow f its peer (D:pr) and listener address (X:lport):
// pr is the app's own port unless another live or recent flow already uses D:pr.
func (e *Engine) mapLocked(f *flow, lport uint16, now int64) bool {
	k := f.key
	x := k.src.Addr()
	switch {
	case x.Is4() && e.refl4.IsValid():
		x = e.refl4
	case x.Is6() && e.refl6.IsValid():
		x = e.refl6
	}
	peer := k.dst
	free := func(pr uint16) bool {
		peer = netip.AddrPortFrom(k.dst.Addr(), pr)
		if e.byPeer[peer] != nil {
			return false
		}
		if t, ok := e.recent[peer]; ok && t > now {
			return false
		}
		return true
	}
	ok := free(k.src.Port())
	for i := 0; !ok && i < 64; i++ {
		ok = free(uint16(1024 + rand.N(65536-1024)))
	}
	if !ok {
		return false
	}
	f.peer, f.to = peer, netip.AddrPortFrom(x, lport)
	e.byPeer[peer] = f
	return true
}
