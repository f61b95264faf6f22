package platform

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// linkEvents subscribes to the kernel's interface and address notifications (rtnetlink
// groups RTMGRP_LINK, RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR) and delivers one value per
// burst: the receiver reads the interface list itself, so the messages are not parsed. A
// lost notification (the socket's buffer overflowed) is delivered as a value too. stop ends
// the subscription.
func linkEvents() (<-chan struct{}, func(), error) {
	c, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{
		Groups: unix.RTMGRP_LINK | unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR,
	})
	if err != nil {
		return nil, nil, err
	}
	out := make(chan struct{}, 1)
	var stopped atomic.Bool
	go func() {
		for {
			_, err := c.Receive()
			if stopped.Load() {
				return
			}
			select {
			case out <- struct{}{}:
			default:
			}
			if err != nil {
				var ne *netlink.OpError
				if errors.As(err, &ne) && errors.Is(ne.Err, unix.ENOBUFS) {
					continue // lost some: the value above makes the receiver look
				}
				time.Sleep(time.Second) // a broken socket must not spin
			}
		}
	}()
	return out, func() {
		stopped.Store(true)
		c.Close()
	}, nil
}
