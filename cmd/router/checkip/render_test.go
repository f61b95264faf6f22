package checkip

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// sampleReport is a run in the cage with every check on, built by hand so timings are fixed.
func sampleReport() Report {
	return Report{
		Exit: ExitCheck{Status: Pass, Detail: "198.51.100.7 via http://203.0.113.10/, as expected",
			Address: mustAddr("198.51.100.7"), URL: "http://203.0.113.10/",
			Attempts: []Attempt{{URL: "http://203.0.113.10/", Address: mustAddr("198.51.100.7"), Elapsed: 12300 * time.Microsecond}}},
		Model: ModelCheck{Status: Pass, Detail: "qwen2.5-coder in 4 ms from http://10.0.2.2:47831/v1/models",
			URL: "http://10.0.2.2:47831/v1/models", IDs: []string{"qwen2.5-coder"}, HTTPStatus: 200, Elapsed: 4 * time.Millisecond},
		DNS: DNSCheck{Status: Fail, Detail: "whoami.test answers 192.0.2.1, the --expect-not address: DNS leaks",
			Name: "whoami.test", Answers: []netip.Addr{mustAddr("192.0.2.1")}},
		UDP: UDPCheck{Status: Pass, Detail: "no answer from 2 STUN addresses within 5s (silence only means nothing answered)",
			Targets: []string{"203.0.113.20:3478"}},
		IPv6: IPv6Check{Status: Pass, Detail: "no IPv6 route: IPv6 cannot get out directly"},
	}
}

func TestWriteText(t *testing.T) {
	tests := []struct {
		name   string
		report func() Report
		want   string
	}{
		{"one failure", sampleReport, `✓ exit  198.51.100.7 via http://203.0.113.10/, as expected
✓ model qwen2.5-coder in 4 ms from http://10.0.2.2:47831/v1/models
✗ dns   whoami.test answers 192.0.2.1, the --expect-not address: DNS leaks
✓ udp   no answer from 2 STUN addresses within 5s (silence only means nothing answered)
✓ ipv6  no IPv6 route: IPv6 cannot get out directly
verdict: FAIL (dns)
`},
		{"all pass, some skipped", func() Report {
			r := sampleReport()
			r.DNS, r.Model = DNSCheck{}, ModelCheck{}
			r.UDP.Status, r.UDP.Detail = Unknown, "not probed: stun.test:3478: no such host"
			return r
		}, `✓ exit  198.51.100.7 via http://203.0.113.10/, as expected
- model not checked (--model URL)
- dns   not checked (--dns-whoami NAME)
? udp   not probed: stun.test:3478: no such host
✓ ipv6  no IPv6 route: IPv6 cannot get out directly
verdict: ok, exit 198.51.100.7: no check failed, 1 undecided
`},
		{"nothing answered", func() Report {
			return Report{Exit: ExitCheck{Status: Unknown, Detail: "no echo endpoint answered (1 tried; last: no answer within 5s)"}}
		}, `? exit  no echo endpoint answered (1 tried; last: no answer within 5s)
- model not checked (--model URL)
- dns   not checked (--dns-whoami NAME)
- udp   not checked (--no-udp)
- ipv6  not checked (--no-ipv6)
verdict: cannot tell: no echo endpoint answered, so the exit address is unknown
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteText(&b, tt.report()); err != nil {
				t.Fatalf("WriteText: %v", err)
			}
			if got := b.String(); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// jsonShape mirrors what a script reads from --json; the test decodes into it with unknown
// fields refused, so the shape cannot drift unnoticed.
type jsonShape struct {
	Verdict  string `json:"verdict"`
	ExitCode int    `json:"exit_code"`
	Exit     struct {
		Status   string `json:"status"`
		Detail   string `json:"detail"`
		Address  string `json:"address"`
		URL      string `json:"url"`
		Attempts []struct {
			URL     string  `json:"url"`
			Address string  `json:"address"`
			Error   string  `json:"error"`
			MS      float64 `json:"ms"`
		} `json:"attempts"`
	} `json:"exit"`
	Model struct {
		Status     string   `json:"status"`
		Detail     string   `json:"detail"`
		URL        string   `json:"url"`
		IDs        []string `json:"ids"`
		HTTPStatus int      `json:"http_status"`
		MS         *float64 `json:"ms"`
		Management string   `json:"management"`
	} `json:"model"`
	DNS struct {
		Status  string   `json:"status"`
		Detail  string   `json:"detail"`
		Name    string   `json:"name"`
		Answers []string `json:"answers"`
		TXT     []string `json:"txt"`
	} `json:"dns"`
	UDP struct {
		Status    string   `json:"status"`
		Detail    string   `json:"detail"`
		Targets   []string `json:"targets"`
		ReplyFrom string   `json:"reply_from"`
		Mapped    string   `json:"mapped"`
	} `json:"udp"`
	IPv6 struct {
		Status   string `json:"status"`
		Detail   string `json:"detail"`
		Route    *bool  `json:"route"`
		Address  string `json:"address"`
		URL      string `json:"url"`
		Attempts []struct {
			URL     string  `json:"url"`
			Address string  `json:"address"`
			Error   string  `json:"error"`
			MS      float64 `json:"ms"`
		} `json:"attempts"`
	} `json:"ipv6"`
}

func decodeJSON(t *testing.T, b []byte) jsonShape {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var got jsonShape
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return got
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, sampleReport()); err != nil {
		t.Fatalf("WriteJSON: %v", err)
	}
	got := decodeJSON(t, b.Bytes())
	if got.Verdict != "fail" || got.ExitCode != ExitFail {
		t.Errorf("verdict %q code %d, want fail 1", got.Verdict, got.ExitCode)
	}
	if got.Exit.Status != "pass" || got.Exit.Address != "198.51.100.7" || got.Exit.URL != "http://203.0.113.10/" {
		t.Errorf("exit = %+v", got.Exit)
	}
	if len(got.Exit.Attempts) != 1 || got.Exit.Attempts[0].MS != 12.3 {
		t.Errorf("attempts = %+v, want one of 12.3 ms", got.Exit.Attempts)
	}
	if got.Model.Status != "pass" || len(got.Model.IDs) != 1 || got.Model.IDs[0] != "qwen2.5-coder" ||
		got.Model.MS == nil || *got.Model.MS != 4 || got.Model.HTTPStatus != 200 {
		t.Errorf("model = %+v", got.Model)
	}
	if got.DNS.Status != "fail" || len(got.DNS.Answers) != 1 || got.DNS.Answers[0] != "192.0.2.1" {
		t.Errorf("dns = %+v", got.DNS)
	}
	if got.UDP.Status != "pass" || got.UDP.ReplyFrom != "" || got.UDP.Mapped != "" {
		t.Errorf("udp = %+v", got.UDP)
	}
	if got.IPv6.Status != "pass" || got.IPv6.Route == nil || *got.IPv6.Route {
		t.Errorf("ipv6 = %+v, want pass with route false", got.IPv6)
	}

	t.Run("skipped checks", func(t *testing.T) {
		var b bytes.Buffer
		if err := WriteJSON(&b, Report{Exit: ExitCheck{Status: Unknown, Detail: "x"}}); err != nil {
			t.Fatalf("WriteJSON: %v", err)
		}
		got := decodeJSON(t, b.Bytes())
		if got.Verdict != "no-answer" || got.ExitCode != ExitNoAnswer || got.Exit.Status != "unknown" {
			t.Errorf("verdict %q code %d exit %q", got.Verdict, got.ExitCode, got.Exit.Status)
		}
		if got.Model.Status != "skipped" || got.Model.Detail != "not checked (--model URL)" || got.Model.MS != nil || got.IPv6.Route != nil {
			t.Errorf("skipped checks carry figures: model %+v ipv6 %+v", got.Model, got.IPv6)
		}
		if strings.Contains(b.String(), `"address"`) {
			t.Errorf("empty addresses are printed: %s", b.String())
		}
	})
}
