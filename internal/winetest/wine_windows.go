//go:build windows

package winetest

import "golang.org/x/sys/windows"

// UnderWine reports whether the test binary runs under Wine (its ntdll exports
// wine_get_version), for the tests that assert what Wine does differently.
func UnderWine() bool {
	return windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
}
