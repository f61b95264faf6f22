package service

import (
	"slices"
	"strings"
)

// ACE is one entry of a file's or directory's access list, as the checks read it.
type ACE struct {
	SID  string // the account, as a SID string
	Mask uint32 // the access rights
	// Allow: an access-allowed entry (denies never add rights); InheritOnly: it applies to
	// the children only (CREATOR OWNER's, typically), not to the object itself.
	Allow, InheritOnly bool
}

// Rights that let an account change what a SYSTEM service reads or runs from a file or a
// directory (winnt.h): write or append data (in a directory: add a file or a subdirectory),
// write attributes or extended attributes, delete, delete children, change the access
// list or the owner, generic write and all.
const (
	rightWriteData    = 0x2
	rightAppendData   = 0x4
	rightWriteEA      = 0x10
	rightDeleteChild  = 0x40
	rightWriteAttrs   = 0x100
	rightDelete       = 0x10000
	rightWriteDAC     = 0x40000
	rightWriteOwner   = 0x80000
	rightGenericAll   = 0x10000000
	rightGenericWrite = 0x40000000

	writeMask = rightWriteData | rightAppendData | rightWriteEA | rightDeleteChild | rightWriteAttrs |
		rightDelete | rightWriteDAC | rightWriteOwner | rightGenericAll | rightGenericWrite
)

// trustedSIDs may write what the service trusts: SYSTEM, Administrators, TrustedInstaller.
var trustedSIDs = []string{"S-1-5-18", "S-1-5-32-544", "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"}

// Writers returns the accounts other than SYSTEM, Administrators and TrustedInstaller that
// an access list lets change the object (sorted, each once); "Everyone (no access list)"
// when the object has none, which lets everyone.
func Writers(aces []ACE, hasDACL bool) []string {
	if !hasDACL {
		return []string{"Everyone (no access list)"}
	}
	var out []string
	for _, a := range aces {
		if !a.Allow || a.InheritOnly || a.Mask&writeMask == 0 || slices.Contains(trustedSIDs, strings.ToUpper(a.SID)) {
			continue
		}
		out = append(out, a.SID)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
