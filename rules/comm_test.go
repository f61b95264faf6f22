package rules

import "testing"

// TestAppMatchesComm: an app entry that is not a path matches the image name or the
// command name (a binary started through a link of another name); a path entry only the
// path.
func TestAppMatchesComm(t *testing.T) {
	for _, tc := range []struct {
		app  string
		q    Query
		want bool
	}{
		{"pasta", Query{App: "passt.avx2", AppPath: "/usr/bin/passt.avx2", Comm: "pasta"}, true},
		{"passt.avx2", Query{App: "passt.avx2", Comm: "pasta"}, true},
		{"qemu-system-*", Query{App: "qemu-kvm", Comm: "qemu-system-x86"}, true},
		{"slirp4netns", Query{App: "passt.avx2", Comm: "pasta"}, false},
		{"/usr/bin/pasta", Query{App: "passt.avx2", AppPath: "/usr/bin/passt.avx2", Comm: "pasta"}, false},
		{"PASTA", Query{Comm: "pasta"}, true},
	} {
		r := Rule{Apps: []App{MustApp(tc.app)}}
		if got := r.MatchApp(&tc.q); got != tc.want {
			t.Errorf("apps %q against %+v: %v, want %v", tc.app, tc.q, got, tc.want)
		}
	}
}
