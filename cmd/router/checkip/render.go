package checkip

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
)

// Marker returns the sign the human output puts before a check: ✓ pass, ✗ fail, ? unknown,
// - skipped.
func (s Status) Marker() string {
	switch s {
	case Pass:
		return "✓"
	case Fail:
		return "✗"
	case Unknown:
		return "?"
	}
	return "-"
}

// MarshalText makes a Status its String in JSON.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Verdict is a one-word summary of ExitCode: "ok", "fail" or "no-answer".
func (r Report) Verdict() string {
	switch r.ExitCode() {
	case ExitFail:
		return "fail"
	case ExitNoAnswer:
		return "no-answer"
	}
	return "ok"
}

// WriteText writes the human summary: one line per check ("✓ exit   203.0.113.7 via ...")
// and a last line with the verdict. Text from servers is already made printable in the
// report's Detail fields.
func WriteText(w io.Writer, r Report) error {
	var b strings.Builder
	line := func(name string, s Status, detail string) {
		fmt.Fprintf(&b, "%s %-5s %s\n", s.Marker(), name, detailOf(name, s, detail))
	}
	line("exit", r.Exit.Status, r.Exit.Detail)
	line("model", r.Model.Status, r.Model.Detail)
	line("dns", r.DNS.Status, r.DNS.Detail)
	line("udp", r.UDP.Status, r.UDP.Detail)
	line("ipv6", r.IPv6.Status, r.IPv6.Detail)
	if r.Host.Status != Skipped { // only with --host-probe
		line("host", r.Host.Status, r.Host.Detail)
		for _, l := range hostLines(r.Host) {
			fmt.Fprintf(&b, "        %s\n", l)
		}
	}

	names := [...]string{"exit", "model", "dns", "udp", "ipv6", "host"} // in the order of r.statuses()
	var failed []string
	undecided := 0
	for i, s := range r.statuses() {
		switch s {
		case Fail:
			failed = append(failed, names[i])
		case Unknown:
			undecided++
		}
	}
	switch r.ExitCode() {
	case ExitFail:
		fmt.Fprintf(&b, "verdict: FAIL (%s)\n", strings.Join(failed, ", "))
	case ExitNoAnswer:
		b.WriteString("verdict: cannot tell: no echo endpoint answered, so the exit address is unknown\n")
	default:
		note := "every check that ran passed"
		if undecided > 0 {
			note = fmt.Sprintf("no check failed, %d undecided", undecided)
		}
		fmt.Fprintf(&b, "verdict: ok, exit %s: %s\n", r.Exit.Address, note)
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// detailOf is the sentence shown for a check: its Detail, or for a skipped check how to turn
// it on.
func detailOf(name string, s Status, detail string) string {
	if s != Skipped {
		return detail
	}
	switch name {
	case "model":
		return "not checked (--model URL)"
	case "dns":
		return "not checked (--dns-whoami NAME)"
	case "udp":
		return "not checked (--no-udp)"
	case "ipv6":
		return "not checked (--no-ipv6)"
	case "host":
		return "not checked (--host-probe)"
	}
	return "not checked"
}

// The JSON output, a contract for scripts: every check is present (host only with
// --host-probe) with "status" ("pass", "fail", "unknown", "skipped") and "detail" (the human line); addresses are strings, times are
// milliseconds; empty fields are left out.
type (
	jsonReport struct {
		Verdict  string    `json:"verdict"`   // "ok", "fail", "no-answer"
		ExitCode int       `json:"exit_code"` // the process's exit status
		Exit     jsonExit  `json:"exit"`
		Model    jsonModel `json:"model"`
		DNS      jsonDNS   `json:"dns"`
		UDP      jsonUDP   `json:"udp"`
		IPv6     jsonIPv6  `json:"ipv6"`
		Host     *jsonHost `json:"host,omitempty"` // only with --host-probe
	}
	jsonHost struct {
		Status  Status          `json:"status"`
		Detail  string          `json:"detail"`
		Allowed []string        `json:"allowed,omitempty"`
		Probes  []jsonHostProbe `json:"probes,omitempty"`
	}
	jsonHostProbe struct {
		Address string  `json:"address"`
		Why     string  `json:"why"`
		State   string  `json:"state"` // "open", "refused", "no answer", "unreachable"
		Allowed bool    `json:"allowed,omitempty"`
		Error   string  `json:"error,omitempty"`
		MS      float64 `json:"ms"`
	}
	jsonAttempt struct {
		URL     string  `json:"url"`
		Address string  `json:"address,omitempty"`
		Error   string  `json:"error,omitempty"`
		MS      float64 `json:"ms"`
	}
	jsonExit struct {
		Status   Status        `json:"status"`
		Detail   string        `json:"detail"`
		Address  string        `json:"address,omitempty"`
		URL      string        `json:"url,omitempty"`
		Attempts []jsonAttempt `json:"attempts,omitempty"`
	}
	jsonModel struct {
		Status     Status   `json:"status"`
		Detail     string   `json:"detail"`
		URL        string   `json:"url,omitempty"`
		IDs        []string `json:"ids,omitempty"`
		HTTPStatus int      `json:"http_status,omitempty"`
		MS         *float64 `json:"ms,omitempty"`
		Management string   `json:"management,omitempty"` // "refused", "open" or "unknown"
	}
	jsonDNS struct {
		Status  Status   `json:"status"`
		Detail  string   `json:"detail"`
		Name    string   `json:"name,omitempty"`
		Answers []string `json:"answers,omitempty"`
		TXT     []string `json:"txt,omitempty"`
	}
	jsonUDP struct {
		Status  Status   `json:"status"`
		Detail  string   `json:"detail"`
		Targets []string `json:"targets,omitempty"`
		From    string   `json:"reply_from,omitempty"`
		Mapped  string   `json:"mapped,omitempty"` // the address the STUN server saw
	}
	jsonIPv6 struct {
		Status   Status        `json:"status"`
		Detail   string        `json:"detail"`
		Route    *bool         `json:"route,omitempty"` // an IPv6 route exists; absent when skipped
		Address  string        `json:"address,omitempty"`
		URL      string        `json:"url,omitempty"`
		Attempts []jsonAttempt `json:"attempts,omitempty"`
	}
)

// WriteJSON writes the report as one indented JSON object (the shape is documented on the
// jsonReport type and in the command's help).
func WriteJSON(w io.Writer, r Report) error {
	j := jsonReport{
		Verdict:  r.Verdict(),
		ExitCode: r.ExitCode(),
		Exit: jsonExit{
			Status: r.Exit.Status, Detail: detailOf("exit", r.Exit.Status, r.Exit.Detail), Address: addrString(r.Exit.Address),
			URL: r.Exit.URL, Attempts: jsonAttempts(r.Exit.Attempts),
		},
		Model: jsonModel{
			Status: r.Model.Status, Detail: detailOf("model", r.Model.Status, r.Model.Detail), URL: r.Model.URL, IDs: r.Model.IDs,
			HTTPStatus: r.Model.HTTPStatus, Management: string(r.Model.Management),
		},
		DNS: jsonDNS{Status: r.DNS.Status, Detail: detailOf("dns", r.DNS.Status, r.DNS.Detail), Name: r.DNS.Name, TXT: r.DNS.TXT},
		UDP: jsonUDP{
			Status: r.UDP.Status, Detail: detailOf("udp", r.UDP.Status, r.UDP.Detail), Targets: r.UDP.Targets,
			From: addrPortString(r.UDP.From), Mapped: addrPortString(r.UDP.Mapped),
		},
		IPv6: jsonIPv6{
			Status: r.IPv6.Status, Detail: detailOf("ipv6", r.IPv6.Status, r.IPv6.Detail), Address: addrString(r.IPv6.Address),
			URL: r.IPv6.URL, Attempts: jsonAttempts(r.IPv6.Attempts),
		},
	}
	if r.Host.Status != Skipped {
		h := &jsonHost{Status: r.Host.Status, Detail: r.Host.Detail}
		for _, a := range r.Host.Allowed {
			h.Allowed = append(h.Allowed, a.String())
		}
		for _, p := range r.Host.Probes {
			h.Probes = append(h.Probes, jsonHostProbe{Address: p.Addr.String(), Why: p.Why, State: string(p.State), Allowed: p.Allowed, Error: p.Err, MS: millis(p.Elapsed)})
		}
		j.Host = h
	}
	if r.Model.Status != Skipped {
		ms := millis(r.Model.Elapsed)
		j.Model.MS = &ms
	}
	for _, a := range r.DNS.Answers {
		j.DNS.Answers = append(j.DNS.Answers, a.String())
	}
	if r.IPv6.Status != Skipped {
		route := r.IPv6.Route
		j.IPv6.Route = &route
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func jsonAttempts(as []Attempt) []jsonAttempt {
	var out []jsonAttempt
	for _, a := range as {
		out = append(out, jsonAttempt{URL: a.URL, Address: addrString(a.Address), Error: a.Err, MS: millis(a.Elapsed)})
	}
	return out
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func addrPortString(a netip.AddrPort) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// millis is d in milliseconds, rounded to 0.1 ms.
func millis(d time.Duration) float64 {
	return float64(d.Round(100*time.Microsecond)) / float64(time.Millisecond)
}
