package main

import (
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/router/control"
)

// budgetStatus is a daemon with both [budget]s: one guest past the upload budget for one
// domain, and past the name budget for another.
func budgetStatus() *control.Status {
	st := sampleStatus()
	st.DomainBudgets = []control.DomainBudgetStat{
		{Budget: control.BudgetBytesUp, Guest: "vm 10.0.2.0/24", Domain: "example.com", Used: 60 << 20, Limit: 50 << 20, Ends: watchNow.Add(40 * time.Second), Over: true},
		{Budget: control.BudgetBytesUp, Guest: "vm 10.0.2.0/24", Domain: "github.com", Used: 3 << 20, Limit: 50 << 20, Ends: watchNow.Add(40 * time.Second)},
		{Budget: control.BudgetNames, Guest: "10.0.2.0/24", Domain: "exfil.example", Used: 201, Limit: 200, Ends: watchNow.Add(10 * time.Second), Over: true},
	}
	return st
}

// TestStatusDomainBudgets: status and watch show each guest's bytes up and names under each
// domain against their budgets, and the time left in the window.
func TestStatusDomainBudgets(t *testing.T) {
	m := newTestWatch(t, &fakeDaemon{st: budgetStatus()}, 160, 60)
	for name, out := range map[string]string{"status": statusText(budgetStatus(), watchNow), "watch": m.View()} {
		var lines []string // each line's words, one space apart
		for _, l := range strings.Split(out, "\n") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
		flat := strings.Join(lines, "\n")
		for _, want := range []string{
			"BUDGET GUEST DOMAIN USED WINDOW ENDS",
			"bytes up vm 10.0.2.0/24 example.com 60.0 MiB of 50.0 MiB OVER in 40s",
			"bytes up vm 10.0.2.0/24 github.com 3.0 MiB of 50.0 MiB in 40s",
			"names 10.0.2.0/24 exfil.example 201 of 200 OVER in 10s",
		} {
			if !strings.Contains(flat, want) {
				t.Errorf("%s: missing %q in:\n%s", name, want, out)
			}
		}
	}
}
