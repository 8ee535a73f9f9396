package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// AggregatorConfig says where an OFMF/Sunfish-style Redfish aggregator is
// and how the box registers with it (AggregationService, DSP0268).
type AggregatorConfig struct {
	// URL is the aggregator's service root (https://agg/redfish/v1).
	URL string
	// User and Password log in to the aggregator (HTTP Basic).
	User, Password string
	// BoxURL is this box's service root as the aggregator reaches it
	// (AggregationSource.HostName).
	BoxURL string
	// BoxUser and BoxPassword are the box account the aggregator uses
	// (AggregationSource.UserName/Password): create it for the
	// aggregator alone, with the least role it needs.
	BoxUser, BoxPassword string
	Client               *http.Client
}

// Register makes the box one of the aggregator's AggregationSources and
// returns that source's URI. It is idempotent: a source whose HostName is
// already BoxURL is returned, not duplicated.
func Register(ctx context.Context, cfg AggregatorConfig) (string, error) {
	if cfg.URL == "" || cfg.BoxURL == "" {
		return "", errors.New("fleet: aggregator: its URL and the box's URL are required")
	}
	if cfg.Client == nil {
		cfg.Client = http.DefaultClient
	}
	root := strings.TrimSuffix(cfg.URL, "/")
	var svc struct {
		AggregationSources struct {
			ID string `json:"@odata.id"`
		}
	}
	if err := aggDo(ctx, cfg, http.MethodGet, root+"/AggregationService", nil, &svc, nil); err != nil {
		return "", err
	}
	coll := svc.AggregationSources.ID
	if coll == "" {
		return "", fmt.Errorf("fleet: aggregator %s: its AggregationService has no AggregationSources", root)
	}
	collURL := absURL(root, coll)
	var members struct {
		Members []struct {
			ID string `json:"@odata.id"`
		}
	}
	if err := aggDo(ctx, cfg, http.MethodGet, collURL, nil, &members, nil); err != nil {
		return "", err
	}
	for _, m := range members.Members {
		var src struct{ HostName string }
		if err := aggDo(ctx, cfg, http.MethodGet, absURL(root, m.ID), nil, &src, nil); err != nil {
			return "", err
		}
		if src.HostName == cfg.BoxURL {
			return m.ID, nil
		}
	}
	body := map[string]string{"HostName": cfg.BoxURL, "UserName": cfg.BoxUser, "Password": cfg.BoxPassword}
	var created struct {
		ID string `json:"@odata.id"`
	}
	var loc string
	if err := aggDo(ctx, cfg, http.MethodPost, collURL, body, &created, &loc); err != nil {
		return "", err
	}
	if created.ID != "" {
		return created.ID, nil
	}
	if loc == "" {
		return "", fmt.Errorf("fleet: aggregator %s: created a source but named it neither in Location nor @odata.id", root)
	}
	return loc, nil
}

// absURL resolves an @odata.id (a path) against the aggregator's root.
func absURL(root, id string) string {
	if strings.HasPrefix(id, "http://") || strings.HasPrefix(id, "https://") {
		return id
	}
	i := strings.Index(root, "/redfish/")
	if i < 0 {
		return root + id
	}
	return root[:i] + id
}

// aggDo runs one request; a Redfish error answer becomes an error naming
// its MessageId.
func aggDo(ctx context.Context, cfg AggregatorConfig, method, url string, body, out any, location *string) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("fleet: aggregator: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return fmt.Errorf("fleet: aggregator: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("OData-Version", "4.0")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cfg.User != "" {
		req.SetBasicAuth(cfg.User, cfg.Password)
	}
	resp, err := cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("fleet: aggregator: %s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("fleet: aggregator: %s %s: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Info    []struct {
					MessageID string `json:"MessageId"`
					Message   string
				} `json:"@Message.ExtendedInfo"`
			} `json:"error"`
		}
		msg := resp.Status
		if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
			msg += ": " + e.Error.Code
			if len(e.Error.Info) > 0 {
				msg += " (" + e.Error.Info[0].MessageID + ": " + e.Error.Info[0].Message + ")"
			}
		}
		return fmt.Errorf("fleet: aggregator refused %s %s: %s", method, url, msg)
	}
	if location != nil {
		*location = resp.Header.Get("Location")
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("fleet: aggregator: %s %s: %w", method, url, err)
		}
	}
	return nil
}
