package roottest

import (
	"os"
	"strings"
	"testing"
)

func TestEnabled(t *testing.T) {
	for _, tt := range []struct {
		val     string
		want    bool
		wantErr bool
	}{
		{"", false, false},
		{"0", false, false},
		{"1", true, false},
		{"yes", false, true},
		{"true", false, true},
	} {
		t.Run("value "+tt.val, func(t *testing.T) {
			t.Setenv(Env, tt.val)
			got, err := Enabled()
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("Enabled() = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCheckNamesWhatIsMissing(t *testing.T) {
	err := Check("router-no-such-tool")
	if err == nil {
		t.Fatal("Check with a missing tool returned nil")
	}
	if !strings.Contains(err.Error(), "router-no-such-tool is missing") {
		t.Errorf("error %q does not name the missing tool", err)
	}
	if os.Geteuid() != 0 && !strings.Contains(err.Error(), "not root") {
		t.Errorf("error %q does not say the process is not root", err)
	}
}

// TestRequireSkipsByDefault: without the variable a privileged test skips (it does not fail).
func TestRequireSkipsByDefault(t *testing.T) {
	t.Setenv(Env, "")
	ran := false
	t.Run("gated", func(t *testing.T) {
		Require(t, "router-no-such-tool")
		ran = true
	})
	if ran {
		t.Error("Require did not stop the test")
	}
}
