package adapters

import (
	"bufio"
	"io"
	"strings"
)

// ParseWSLConfig reads the [wsl2] keys of a .wslconfig file (%UserProfile%\.wslconfig) that
// matter to the cage: networkingMode, dnsTunneling and firewall. Unknown keys and other
// sections are ignored; keys compare without case, as Windows' INI files do.
func ParseWSLConfig(r io.Reader) (WSL, error) {
	var w WSL
	sc := bufio.NewScanner(r)
	section := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.ToLower(strings.TrimSpace(line[1 : len(line)-1]))
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section != "wsl2" {
			continue
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.TrimSpace(v)
		if i := strings.IndexAny(v, "#;"); i >= 0 {
			v = strings.TrimSpace(v[:i])
		}
		switch k {
		case "networkingmode":
			w.Mode = strings.ToLower(v)
		case "dnstunneling":
			w.DNSTunneling = parseBool(v)
		case "firewall":
			w.Firewall = parseBool(v)
		}
	}
	return w, sc.Err()
}

func parseBool(s string) *bool {
	switch strings.ToLower(s) {
	case "true", "1", "yes", "on":
		b := true
		return &b
	case "false", "0", "no", "off":
		b := false
		return &b
	}
	return nil
}
