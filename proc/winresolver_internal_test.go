package proc

import "testing"

func TestBaseName(t *testing.T) {
	for in, want := range map[string]string{
		`C:\Windows\System32\svchost.exe`: "svchost.exe",
		`\\?\C:\x\y.exe`:                  "y.exe",
		`/usr/bin/qemu-system-x86_64`:     "qemu-system-x86_64",
		`plain.exe`:                       "plain.exe",
	} {
		if got := baseName(in); got != want {
			t.Errorf("baseName(%q) = %q, want %q", in, got, want)
		}
	}
}
