//go:build windows

package guard

import (
	"os"

	"golang.org/x/sys/windows/registry"
)

// SystemMachine returns the Machine of this Windows host: the registry's 64-bit view,
// the file system and the process environment.
func SystemMachine() Machine { return systemMachine{} }

type systemMachine struct{}

func (systemMachine) RegString(key, value string) (string, error) {
	k, err := registry.OpenKey(registry.LOCAL_MACHINE, key, registry.QUERY_VALUE|registry.WOW64_64KEY)
	if err != nil {
		return "", err
	}
	defer k.Close()
	s, _, err := k.GetStringValue(value)
	if err != nil {
		return "", err
	}
	return registry.ExpandString(s)
}

func (systemMachine) ReadDir(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range es {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (systemMachine) Exists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

func (systemMachine) Getenv(name string) string { return os.Getenv(name) }
