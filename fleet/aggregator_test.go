package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"cxlpool/fleet"
)

// fakeAggregator is the part of an OFMF-style aggregator Register uses.
type fakeAggregator struct {
	mu      sync.Mutex
	sources map[string]map[string]string
	posts   int
}

func (f *fakeAggregator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, p, ok := r.BasicAuth(); !ok || u != "ofmf" || p != "pw" {
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": "Base.1.0.GeneralError",
			"@Message.ExtendedInfo": []map[string]string{{"MessageId": "Base.1.8.NoValidSession", "Message": "no session"}}}})
		return
	}
	const coll = "/redfish/v1/AggregationService/AggregationSources"
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/redfish/v1/AggregationService":
		json.NewEncoder(w).Encode(map[string]any{"AggregationSources": map[string]string{"@odata.id": coll}})
	case r.Method == http.MethodGet && r.URL.Path == coll:
		var m []map[string]string
		for id := range f.sources {
			m = append(m, map[string]string{"@odata.id": id})
		}
		json.NewEncoder(w).Encode(map[string]any{"Members": m})
	case r.Method == http.MethodGet && f.sources[r.URL.Path] != nil:
		json.NewEncoder(w).Encode(map[string]string{"HostName": f.sources[r.URL.Path]["HostName"]})
	case r.Method == http.MethodPost && r.URL.Path == coll:
		var body map[string]string
		if json.NewDecoder(r.Body).Decode(&body) != nil || body["HostName"] == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.posts++
		id := fmt.Sprintf("%s/%d", coll, f.posts)
		f.sources[id] = body
		w.Header().Set("Location", id)
		w.WriteHeader(http.StatusCreated)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func TestRegisterWithAggregator(t *testing.T) {
	agg := &fakeAggregator{sources: map[string]map[string]string{}}
	srv := httptest.NewServer(agg)
	defer srv.Close()
	cfg := fleet.AggregatorConfig{URL: srv.URL + "/redfish/v1", User: "ofmf", Password: "pw",
		BoxURL: "https://box7:8443/redfish/v1", BoxUser: "ofmf-reader", BoxPassword: "box-pw"}
	ctx := context.Background()
	id, err := fleet.Register(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := agg.sources[id], (map[string]string{"HostName": cfg.BoxURL, "UserName": "ofmf-reader", "Password": "box-pw"}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("source %s = %v, want %v", id, got, want)
	}
	// Registering again finds the source: no duplicate.
	again, err := fleet.Register(ctx, cfg)
	if err != nil || again != id || agg.posts != 1 {
		t.Errorf("second Register = %q, %v with %d POSTs; want %q and 1 POST", again, err, agg.posts, id)
	}
	cfg.Password = "wrong"
	if _, err := fleet.Register(ctx, cfg); err == nil || !strings.Contains(err.Error(), "NoValidSession") {
		t.Errorf("Register with a wrong password: %v, want the aggregator's MessageId", err)
	}
	if _, err := fleet.Register(ctx, fleet.AggregatorConfig{URL: srv.URL + "/redfish/v1"}); err == nil {
		t.Error("Register without the box's URL succeeded")
	}
}
