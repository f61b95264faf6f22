package service

import (
	"slices"
	"testing"
)

// TestWriters: the accounts an access list lets write, as the config check refuses them.
// The lists are what Windows gives a file in these places.
func TestWriters(t *testing.T) {
	const (
		system  = "S-1-5-18"
		admins  = "S-1-5-32-544"
		users   = "S-1-5-32-545"
		auth    = "S-1-5-11"
		creator = "S-1-3-0"
		alice   = "S-1-5-21-1-2-3-1001"
	)
	full, rx, addFile := uint32(0x1f01ff), uint32(0x1200a9), uint32(0x2)
	for _, tc := range []struct {
		name    string
		aces    []ACE
		hasDACL bool
		want    []string
	}{
		{"protected (what install sets)", []ACE{{system, full, true, false}, {admins, full, true, false}, {users, rx, true, false}}, true, nil},
		{"a C:\\ProgramData subfolder: users add files", []ACE{{system, full, true, false}, {admins, full, true, false}, {users, rx, true, false}, {users, addFile, true, false}, {creator, full, true, true}}, true, []string{users}},
		{"a user's profile", []ACE{{system, full, true, false}, {admins, full, true, false}, {alice, full, true, false}}, true, []string{alice}},
		{"authenticated users modify (C:\\ root folders)", []ACE{{auth, 0x1301bf, true, false}}, true, []string{auth}},
		{"a deny does not count", []ACE{{users, full, false, false}}, true, nil},
		{"creator owner inherit-only does not apply", []ACE{{creator, full, true, true}}, true, nil},
		{"no access list", nil, false, []string{"Everyone (no access list)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Writers(tc.aces, tc.hasDACL); !slices.Equal(got, tc.want) {
				t.Errorf("Writers = %q, want %q", got, tc.want)
			}
		})
	}
}
