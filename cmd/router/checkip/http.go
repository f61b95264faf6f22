package checkip

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// get fetches u with one attempt bounded by the timeout and returns the body, read up to max
// bytes, and the HTTP status (0 without a response). A status other than 2xx is an error.
func (r *runner) get(ctx context.Context, client *http.Client, u, accept string, max int64) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("User-Agent", "router-check-ip")
	req.Header.Set("Accept", accept)
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is reported next to the error already; ue.Err names its operation
		}
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, resp.StatusCode, fmt.Errorf("http status %q", resp.Status)
	}
	body, err := readBounded(resp.Body, max)
	return body, resp.StatusCode, err
}
