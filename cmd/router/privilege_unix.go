//go:build !windows

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// capNetAdmin is CAP_NET_ADMIN's bit in a capability set.
const capNetAdmin = 12

// hostPrivileged is privileged for this process: CAP_NET_ADMIN in its effective set
// (/proc/self/status), or, where there is no /proc, an effective user id of 0.
func hostPrivileged() (bool, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return os.Geteuid() == 0, nil
	}
	return capEffHas(b, capNetAdmin)
}

// capEffHas reports whether the CapEff line of a /proc/PID/status holds capability bit.
func capEffHas(status []byte, bit uint) (bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return false, fmt.Errorf("read the effective capabilities %q: %w", v, err)
		}
		return mask&(1<<bit) != 0, nil
	}
	return false, fmt.Errorf("no CapEff line in the process status")
}
