package checkip

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// model fetches the model list.
func (r *runner) model(ctx context.Context) ModelCheck {
	m := ModelCheck{URL: r.modelURL}
	start := time.Now()
	body, status, err := r.get(ctx, r.client, r.modelURL, "application/json", MaxModelBody)
	var ids []string
	if err == nil {
		ids, err = ParseModels(body)
	}
	m.Elapsed, m.HTTPStatus = time.Since(start), status
	took := formatDuration(m.Elapsed)
	switch {
	case err != nil:
		m.Status, m.Detail = Fail, fmt.Sprintf("%s: %s", m.URL, r.describe(err))
	case len(ids) == 0:
		m.Status, m.Detail = Fail, fmt.Sprintf("%s answered in %s but lists no model", m.URL, took)
	default:
		m.IDs = ids
		const show = 5
		list := make([]string, 0, show)
		for i, id := range ids {
			if i == show {
				break
			}
			list = append(list, clean(id))
		}
		more := ""
		if len(ids) > show {
			more = fmt.Sprintf(" and %d more", len(ids)-show)
		}
		m.Status = Pass
		m.Detail = fmt.Sprintf("%s%s in %s from %s", strings.Join(list, ", "), more, took, m.URL)
	}
	if m.HTTPStatus != 0 {
		var detail string
		m.Management, detail = r.management(ctx, m.URL)
		if m.Management == ManagementOpen {
			m.Status = Fail
		}
		m.Detail += "; " + detail
	}
	return m
}
