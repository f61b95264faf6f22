package nftcap

import (
	"errors"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The policy routing TPROXY needs: a datagram it hands to the router still carries its
// original destination, a remote address, and would be forwarded; marked with UDPMark it is
// routed by table UDPTable instead, whose only route says that every address is local.
//
//	ip rule add fwmark UDPMark/0xffffffff lookup UDPTable priority udpRulePriority proto 82
//	ip route replace local default dev lo table UDPTable proto 82     (and the same for -6)
//
// rtnetlink through github.com/jsimonetti/rtnetlink/v2: it builds on the netlink package that
// github.com/google/nftables already brings (no second netlink stack), and opens its socket
// in a namespace given by descriptor the same way (WithNetNS), so both halves of the capture
// act in the namespace the caller chose. Rules and routes carry our own protocol number,
// which is how Remove and the next Install find them: one router per network namespace.
const (
	// udpRouteProto is the rtnetlink protocol (RTPROT_*) of our rules and routes; 82 is
	// unassigned (include/uapi/linux/rtnetlink.h).
	udpRouteProto = 82
	// udpRulePriority is the rule's place: after the local table's rule (0), before main
	// (32766).
	udpRulePriority = 9300
)

// dialRoute opens an rtnetlink connection in the namespace of o.
func dialRoute(o options) (*rtnetlink.Conn, error) {
	cfg := &netlink.Config{}
	if o.netNS != 0 {
		cfg.NetNS = o.netNS
	}
	c, err := rtnetlink.Dial(cfg)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink: %w", err)
	}
	return c, nil
}

// installUDPRoutes puts the rule and the routes of s in place (both families) and removes
// ours that s does not want (another mark or table, or no TPROXY at all: neither UDPPort
// nor TCPTProxy).
func installUDPRoutes(s Spec, o options) error {
	c, err := dialRoute(o)
	if err != nil {
		return err
	}
	defer c.Close()
	want := s.tproxied()
	rules, err := c.Rule.List()
	if err != nil {
		return fmt.Errorf("list rules: %w", err)
	}
	have := map[uint8]bool{}
	for _, r := range rules {
		if !ours(r.Attributes) {
			continue
		}
		if want && r.Attributes.Table != nil && *r.Attributes.Table == s.UDPTable &&
			r.Attributes.FwMark != nil && *r.Attributes.FwMark == s.UDPMark &&
			r.Attributes.Priority != nil && *r.Attributes.Priority == udpRulePriority && !have[r.Family] {
			have[r.Family] = true
			continue
		}
		if err := c.Rule.Delete(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete stale rule: %w", err)
		}
	}
	routes, err := c.Route.List()
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if r.Protocol != udpRouteProto || want && r.Attributes.Table == s.UDPTable {
			continue
		}
		if err := c.Route.Delete(&r); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("delete stale route: %w", err)
		}
	}
	if !want {
		return nil
	}
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		if err := c.Route.Replace(localRoute(fam, s.UDPTable)); err != nil {
			if fam == unix.AF_INET6 && errors.Is(err, unix.EAFNOSUPPORT) {
				continue // IPv6 disabled: nothing to capture
			}
			return fmt.Errorf("route local default dev lo table %d (family %d): %w", s.UDPTable, fam, err)
		}
		if have[fam] {
			continue
		}
		if err := c.Rule.Add(markRule(fam, s.UDPMark, s.UDPTable)); err != nil && !errors.Is(err, unix.EEXIST) {
			if fam == unix.AF_INET6 && errors.Is(err, unix.EAFNOSUPPORT) {
				continue
			}
			return fmt.Errorf("rule fwmark %#x lookup %d (family %d): %w", s.UDPMark, s.UDPTable, fam, err)
		}
	}
	return nil
}

// removeUDPRoutes deletes our rules and routes.
func removeUDPRoutes(o options) error {
	return installUDPRoutes(Spec{}, o)
}

func ours(a *rtnetlink.RuleAttributes) bool {
	return a != nil && a.Protocol != nil && *a.Protocol == udpRouteProto
}

// localRoute is "local default dev lo table table proto 82" of family fam.
func localRoute(fam uint8, table uint32) *rtnetlink.RouteMessage {
	return &rtnetlink.RouteMessage{
		Family:   fam,
		Table:    unix.RT_TABLE_UNSPEC, // the table is the attribute: it may be above 255
		Protocol: udpRouteProto,
		Scope:    unix.RT_SCOPE_HOST,
		Type:     unix.RTN_LOCAL,
		Attributes: rtnetlink.RouteAttributes{
			OutIface: loopbackIfindex,
			Table:    table,
		},
	}
}

// markRule is "fwmark mark/0xffffffff lookup table priority udpRulePriority proto 82".
func markRule(fam uint8, mark, table uint32) *rtnetlink.RuleMessage {
	mask := uint32(0xffffffff)
	prio := uint32(udpRulePriority)
	proto := uint8(udpRouteProto)
	return &rtnetlink.RuleMessage{
		Family: fam,
		Table:  unix.RT_TABLE_UNSPEC,
		Action: unix.FR_ACT_TO_TBL,
		Attributes: &rtnetlink.RuleAttributes{
			FwMark: &mark, FwMask: &mask, Table: &table, Priority: &prio, Protocol: &proto,
		},
	}
}
