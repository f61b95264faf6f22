package adapters

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// HostResolverVMs returns the VirtualBox VMs whose NAT resolves names through the host's
// resolver ("host resolver" mode: VBoxManage modifyvm VM --natdnshostresolver1 on): their
// guests' DNS is then asked by the host's DNS Client service, not by VirtualBox's process.
// dir is the user's VirtualBox settings directory (%UserProfile%\.VirtualBox, holding
// VirtualBox.xml, which registers each VM's .vbox file); read reads a file. A VM whose file
// cannot be read is skipped.
func HostResolverVMs(dir string, read func(string) ([]byte, error)) ([]string, error) {
	reg, err := read(filepath.Join(dir, "VirtualBox.xml"))
	if err != nil {
		return nil, fmt.Errorf("virtualbox settings: %w", err)
	}
	srcs, err := attrs(reg, "MachineEntry", "src")
	if err != nil {
		return nil, fmt.Errorf("virtualbox settings: %w", err)
	}
	var out []string
	for _, src := range srcs {
		if !filepath.IsAbs(src) {
			src = filepath.Join(dir, src)
		}
		b, err := read(src)
		if err != nil {
			continue
		}
		if name, on := hostResolver(b); on {
			out = append(out, name)
		}
	}
	return out, nil
}

// attrs returns the values of attribute attr of every element el.
func attrs(doc []byte, el, attr string) ([]string, error) {
	var out []string
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == el {
			for _, a := range se.Attr {
				if a.Name.Local == attr {
					out = append(out, a.Value)
				}
			}
		}
	}
}

// hostResolver reads a .vbox file: the machine's name, and whether one of its NAT adapters
// has <DNS use-host-resolver="true"/>.
func hostResolver(doc []byte) (name string, on bool) {
	d := xml.NewDecoder(bytes.NewReader(doc))
	inNAT := 0
	for {
		tok, err := d.Token()
		if err != nil {
			return name, on
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "Machine":
				for _, a := range t.Attr {
					if a.Name.Local == "name" {
						name = a.Value
					}
				}
			case "NAT":
				inNAT++
			case "DNS":
				for _, a := range t.Attr {
					if inNAT > 0 && a.Name.Local == "use-host-resolver" && a.Value == "true" {
						on = true
					}
				}
			}
		case xml.EndElement:
			if t.Name.Local == "NAT" && inNAT > 0 {
				inNAT--
			}
		}
	}
}
