package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestRefusedBeforeLimit: 401s, 403s and the penalty box's 429s are
// counted per route and per second, other statuses not at all; an hour
// later they are gone; past MaxSeries routes they share "other".
func TestRefusedBeforeLimit(t *testing.T) {
	t.Parallel()
	rec := NewRecorder(1000)
	rec.RefusedBeforeLimit("users", http.StatusUnauthorized)
	rec.RefusedBeforeLimit("users", http.StatusUnauthorized)
	rec.RefusedBeforeLimit("partner", http.StatusForbidden)
	rec.RefusedBeforeLimit("", http.StatusForbidden)
	rec.RefusedBeforeLimit("users", http.StatusBadRequest) // not counted
	rec.Tick(1001)
	rec.RefusedBeforeLimit("users", http.StatusTooManyRequests)
	rec.RefusedBeforeLimit("users", http.StatusForbidden)
	got := rec.RefusalPoints(999, 1001)
	want := map[string]string{
		"users":   "[{2 0 0} {0 1 1}]",
		"partner": "[{0 1 0} {0 0 0}]",
		NoRoute:   "[{0 1 0} {0 0 0}]",
	}
	if len(got) != len(want) {
		t.Errorf("routes %v, want %v", got, want)
	}
	for route, pts := range want {
		if fmt.Sprint(got[route]) != pts {
			t.Errorf("%s: %v, want %s", route, got[route], pts)
		}
	}
	rec.Tick(1000 + Window)
	if got := rec.RefusalPoints(1000+Window-2, 1000+Window)["users"]; fmt.Sprint(got) != "[{0 0 0} {0 0 0}]" {
		t.Errorf("after an hour: %v", got)
	}

	// Memory stays bounded: many routes, from many goroutines.
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2*MaxSeries; i++ {
				rec.RefusedBeforeLimit(fmt.Sprintf("r%d", i), http.StatusForbidden)
			}
		}()
	}
	wg.Wait()
	now := rec.Now()
	pts := rec.RefusalPoints(now-1, now)
	if len(pts) != MaxSeries+1 {
		t.Errorf("%d series, want %d and other", len(pts), MaxSeries)
	}
	var total uint64
	for _, p := range pts {
		total += p[0].Forbidden
	}
	if total != 4*2*MaxSeries || pts["other"][0].Forbidden == 0 {
		t.Errorf("%d 403s counted (other: %v), want %d", total, pts["other"], 4*2*MaxSeries)
	}
}

// TestOverviewRefused: the overview sends the refusals of the seconds
// asked for, per route.
func TestOverviewRefused(t *testing.T) {
	t.Parallel()
	rec := NewRecorder(1000)
	rec.RefusedBeforeLimit("partner", http.StatusForbidden)
	rec.RefusedBeforeLimit("users", http.StatusUnauthorized)
	rec.Tick(1001)
	h := NewHandler(Options{Recorder: rec, Info: func() Instance { return Instance{} }})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/ui/api/overview?since=999", nil))
	var got struct {
		From, Until int64
		Refused     map[string][]RefusalPoint
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err, w.Body.String())
	}
	if got.From != 1000 || got.Until != 1000 || fmt.Sprint(got.Refused) != "map[partner:[{0 1 0}] users:[{1 0 0}]]" {
		t.Errorf("%+v", got)
	}
}

// TestRefusedRoutesRenamedGiveTheirSeriesBack: once MaxSeries routes have
// a series of refusals, a route a reload renamed or removed (nothing
// refused on it for a whole Window, so nothing left to show) gives its
// series to a new route; routes refused within the hour keep theirs, and
// with none stale a new route shares "other". Before, the first MaxSeries
// route names kept every series until a restart.
func TestRefusedRoutesRenamedGiveTheirSeriesBack(t *testing.T) {
	t.Parallel()
	rec := NewRecorder(1000)
	for i := range MaxSeries {
		rec.RefusedBeforeLimit(fmt.Sprintf("old%03d", i), http.StatusForbidden)
	}
	end := int64(1000 + Window)
	rec.Tick(end - 1)
	rec.RefusedBeforeLimit("old000", http.StatusUnauthorized) // still configured
	rec.Tick(end)
	rec.RefusedBeforeLimit("new", http.StatusForbidden)
	rec.RefusedBeforeLimit("new", http.StatusForbidden)
	got := rec.RefusalPoints(end-2, end)
	if fmt.Sprint(got["new"]) != "[{0 0 0} {0 2 0}]" || got["other"] != nil {
		t.Errorf("a route added after %d others stopped being refused an hour ago: %v (other %v), want its own series", MaxSeries, got["new"], got["other"])
	}
	if fmt.Sprint(got["old000"]) != "[{1 0 0} {0 0 0}]" {
		t.Errorf("a route refused within the hour: %v, want its series kept", got["old000"])
	}
	if len(got) != MaxSeries {
		t.Errorf("%d series, want %d", len(got), MaxSeries)
	}
	// Every series in use within the hour: new routes share "other".
	for i := range MaxSeries {
		rec.RefusedBeforeLimit(fmt.Sprintf("r%03d", i), http.StatusForbidden)
	}
	got = rec.RefusalPoints(end-1, end)
	if len(got) != MaxSeries+1 || got["new"] == nil || got["old000"] == nil || fmt.Sprint(got["other"]) != "[{0 2 0}]" {
		t.Errorf("%d series (other %v, new kept %v, old000 kept %v); want %d and other counting the 2 past them", len(got), got["other"],
			got["new"] != nil, got["old000"] != nil, MaxSeries)
	}
}
