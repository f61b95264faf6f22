package conf

import (
	"testing"
	"time"
)

// TestBudget: [budget] as written, its defaults, and the size syntax of bytes_up_per_domain.
func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		toml string
		want Budget
	}{
		{"", Budget{}},
		{"[budget]\nnames_per_domain = 200\n", Budget{Window: time.Minute, NamesPerDomain: 200, Over: BudgetRefuse}},
		{"[budget]\nbytes_up_per_domain = \"50MB\"\nwindow = \"10m\"\nover = \"alert\"\n", Budget{Window: 10 * time.Minute, BytesUpPerDomain: 50e6, Over: BudgetAlert}},
		{"[budget]\nbytes_up_per_domain = \"1GiB\"\n", Budget{Window: time.Minute, BytesUpPerDomain: 1 << 30, Over: BudgetRefuse}},
		{"[budget]\nnames_per_domain = 10\nbytes_up_per_domain = 4096\nover = \"ask\"\n", Budget{Window: time.Minute, NamesPerDomain: 10, BytesUpPerDomain: 4096, Over: BudgetAsk}},
		{"[budget]\nbytes_up_per_domain = 4096\n", Budget{Window: time.Minute, BytesUpPerDomain: 4096, Over: BudgetRefuse}},
	} {
		cfg, err := Parse("b.toml", []byte(tc.toml), Options{})
		if err != nil {
			t.Errorf("%q: %v", tc.toml, err)
			continue
		}
		if cfg.Budget != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.toml, cfg.Budget, tc.want)
		}
	}
}
