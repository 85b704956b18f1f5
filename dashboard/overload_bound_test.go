package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"
)

// TestOverloadRoutesBounded: the Health page's overload series are held
// to 128 routes. Twice as many routes sampled, second after second, leave
// the first 128 with a series each and every later one without: the
// overview sends 128 routes, the routes past the bound take no room and
// push no earlier route out, and the first routes keep being drawn, each
// second's sample its own.
func TestOverloadRoutesBounded(t *testing.T) {
	t.Parallel()
	if MaxSeries != 128 {
		t.Fatalf("MaxSeries is %d; docs/overload.md promises 128 routes", MaxSeries)
	}
	rec := NewRecorder(1000)
	for sec := int64(1000); sec < 1003; sec++ {
		rec.Tick(sec)
		for i := range 2 * MaxSeries {
			rec.RecordOverload(fmt.Sprintf("r%03d", i), int(sec)+i, time.Duration(i)*time.Millisecond)
		}
	}
	rec.Tick(1003)
	h := NewHandler(Options{Recorder: rec, Info: func() Instance { return Instance{} }})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/ui/api/overview?since=999", nil))
	var got struct {
		Overload map[string][]OverloadPoint
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err, w.Body.String())
	}
	if len(got.Overload) != MaxSeries {
		t.Errorf("the overview sends %d routes' overload control, want %d", len(got.Overload), MaxSeries)
	}
	for i := range 2 * MaxSeries {
		route := fmt.Sprintf("r%03d", i)
		pts, ok := got.Overload[route]
		if i >= MaxSeries {
			if ok {
				t.Errorf("%s, past the bound, has a series: %v", route, pts)
			}
			continue
		}
		want := fmt.Sprint([]OverloadPoint{{1000, int64(1000 + i), float64(i)}, {1001, int64(1001 + i), float64(i)}, {1002, int64(1002 + i), float64(i)}})
		if fmt.Sprint(pts) != want {
			t.Errorf("%s: %v, want %s", route, pts, want)
		}
	}
}

// TestOverloadRoutesRenamedGiveTheirSeriesBack: once MaxSeries routes have
// had a series, a route a reload renamed or removed (not sampled for a
// whole Window, so it has nothing left to show) gives its series to a new
// route; a route still sampled keeps its own. Before, the first MaxSeries
// route names ever seen kept every series until a restart, and a route
// added after enough renames was never drawn.
func TestOverloadRoutesRenamedGiveTheirSeriesBack(t *testing.T) {
	t.Parallel()
	rec := NewRecorder(1000)
	rec.Tick(1000)
	for i := range MaxSeries {
		rec.RecordOverload(fmt.Sprintf("old%03d", i), 8, 0)
	}
	end := int64(1000 + Window)
	rec.Tick(end - 1)
	rec.RecordOverload("old000", 9, 0) // still configured
	rec.Tick(end)
	rec.RecordOverload("new", 16, time.Millisecond)
	rec.RecordOverload("old000", 10, 0)
	got := rec.OverloadPoints(end-2, end)
	if want := fmt.Sprint([]OverloadPoint{{end, 16, 1}}); fmt.Sprint(got["new"]) != want {
		t.Errorf("a route added after %d others stopped being sampled an hour ago: %v, want %s", MaxSeries, got["new"], want)
	}
	if want := fmt.Sprint([]OverloadPoint{{end - 1, 9, 0}, {end, 10, 0}}); fmt.Sprint(got["old000"]) != want {
		t.Errorf("a route still sampled: %v, want %s", got["old000"], want)
	}
	// Only stale series go: with every series sampled within the hour,
	// another new route is still left out.
	for i := range MaxSeries {
		rec.RecordOverload(fmt.Sprintf("r%03d", i), 4, 0)
	}
	rec.RecordOverload("late", 4, 0)
	if pts := rec.OverloadPoints(end-1, end); len(pts) != MaxSeries || pts["late"] != nil || pts["new"] == nil || pts["old000"] == nil {
		t.Errorf("%d series after a flood of new routes (late %v, new %v, old000 %v); want %d, the live ones kept", len(pts),
			pts["late"] != nil, pts["new"] != nil, pts["old000"] != nil, MaxSeries)
	}
}
