package client

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// WaitTask polls a task monitor until the operation ends and returns its
// final answer: what the original request would have answered had it been
// quick (201 with Location for a create, 204 for a delete). A failed task
// returns the monitor's error as *Error. Polls back off from PollInitial
// to PollMax and never wait longer than the monitor's Retry-After.
// progress, if not nil, sees the Task of every 202 answer.
func (c *Client) WaitTask(ctx context.Context, monitor string, progress func(Task)) (*Response, error) {
	if monitor == "" {
		return nil, fmt.Errorf("client: task monitor: no URI")
	}
	wait := c.cfg.PollInitial
	for {
		r, err := c.Do(ctx, http.MethodGet, monitor, nil)
		if err != nil {
			return nil, err
		}
		if r.Status != http.StatusAccepted {
			return r, nil
		}
		if progress != nil {
			var t Task
			if r.Decode(&t) == nil {
				progress(t)
			}
		}
		d := wait
		if ra := retryAfter(r.Header); ra > 0 && ra < d {
			d = ra
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("client: waiting for task %s: %w", monitor, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, c.cfg.PollMax)
	}
}

// Settle finishes a request that may have been accepted as a task: a 202
// with a Location is waited for with WaitTask; any other answer is
// returned as it is.
func (c *Client) Settle(ctx context.Context, r *Response, progress func(Task)) (*Response, error) {
	if r == nil || r.Status != http.StatusAccepted || r.Location() == "" {
		return r, nil
	}
	return c.WaitTask(ctx, r.Location(), progress)
}
