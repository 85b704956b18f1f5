package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/internal/redisconn"
)

// Instance describes one floodgate serve process of a deployment.
type Instance struct {
	ID       string    `json:"id"`
	Version  string    `json:"config_version"`
	Store    string    `json:"store"`
	Breaker  string    `json:"breaker"` // "closed" or "open"
	Health   Health    `json:"health"`  // over the last minute
	Reloads  uint64    `json:"reloads"`
	Rejected uint64    `json:"rejected"`
	Started  time.Time `json:"started"`
	Seen     time.Time `json:"seen"`
}

// Share exchanges per-instance aggregates through Redis, so that every
// instance's dashboard shows the whole deployment. Once a second each
// instance writes one value (its last ShareSeconds seconds per limit, its
// top keys and its health, expiring after 15 s) and reads the others'
// (one MGET); the cost does not grow with traffic.
type Share struct {
	c    rueidis.Client
	id   string
	rec  *Recorder
	info func() Instance
	log  *slog.Logger

	warned time.Time // when Run last logged a failed sync; Run's own

	mu        sync.Mutex               // guards everything below
	remote    map[string]*remoteSeries // by series name; see ring
	limits    int                      // how many of remote's names are limits
	stamps    [Window]int64
	top       []Hitter
	instances []Instance
}

// remoteSeries is the other instances' sums of one series.
type remoteSeries struct {
	pts  [Window]Point
	last int64 // the last second the blobs counted something in
}

// ShareSeconds is how many completed seconds each instance publishes.
const ShareSeconds = 10

// shareLead is how many seconds another instance's recorder may be ahead
// of this one's (clocks a little apart, or tickers turning at different
// moments) with its counts kept: a merge rebuilds only the last
// ShareSeconds-shareLead seconds, which every blob of such an instance
// still covers, and a second is final once it is older than that. An
// instance up to ShareSeconds-shareLead-1 seconds behind is kept too.
const shareLead = 3

// MaxInstances caps how many instances a dashboard merges.
const MaxInstances = 64

const (
	shareSet    = redisconn.Prefix + "dash:instances"
	sharePrefix = redisconn.Prefix + "dash:inst:"
	shareTTL    = 15 * time.Second
)

// syncTimeout bounds one Sync, whatever its caller's context: the sync
// interval, so that a Redis that stopped answering (stopped, or cut off
// behind an open connection) holds no sync past the next tick.
const syncTimeout = time.Second

// syncWarnEvery is how often Run logs failed syncs at most.
const syncWarnEvery = time.Minute

// NewShare shares rec's aggregates as instance id through c; info
// describes this instance.
func NewShare(c rueidis.Client, id string, rec *Recorder, info func() Instance, log *slog.Logger) *Share {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Share{c: c, id: id, rec: rec, info: info, log: log, remote: map[string]*remoteSeries{}}
}

type shareBlob struct {
	Instance Instance           `json:"instance"`
	From     int64              `json:"from"` // first second of Points
	Points   map[string][]Point `json:"points"`
	Top      []Hitter           `json:"top"`
}

// Run publishes and merges once a second until ctx ends. A failed sync
// (Redis down, or not answering within a second) is logged as a warning
// at most once a minute; the others' data is then as of the last sync
// that succeeded, and an instance not heard from for 15 s drops out.
func (s *Share) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			if now := time.Now(); now.Sub(s.warned) >= syncWarnEvery {
				s.warned = now
				s.log.Warn("dashboard: share", "err", err)
			}
		}
	}
}

// Sync publishes this instance's aggregates and merges the others' now.
// It ends within a second (the sync interval) whatever ctx's deadline,
// with an error if Redis has not answered by then.
func (s *Share) Sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	now := s.rec.Now()
	from := now - ShareSeconds
	info := s.info()
	info.ID, info.Seen = s.id, time.Now().UTC()
	b := shareBlob{Instance: info, From: from, Points: s.rec.Counts(from-1, now-1), Top: s.rec.Hitters().Top(20)}
	js, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	nowMs := time.Now().UnixMilli()
	cmds := rueidis.Commands{
		s.c.B().Set().Key(sharePrefix + s.id).Value(string(js)).Px(shareTTL).Build(),
		s.c.B().Zadd().Key(shareSet).ScoreMember().ScoreMember(float64(nowMs), s.id).Build(),
		s.c.B().Zremrangebyscore().Key(shareSet).Min("-inf").Max(strconv.FormatInt(nowMs-shareTTL.Milliseconds(), 10)).Build(),
		s.c.B().Zrevrange().Key(shareSet).Start(0).Stop(MaxInstances - 1).Build(),
	}
	res := s.c.DoMulti(ctx, cmds...)
	for _, r := range res {
		if err := r.Error(); err != nil {
			return fmt.Errorf("dashboard: redis: %w", err)
		}
	}
	ids, _ := res[3].AsStrSlice()
	keys := make([]string, 0, len(ids))
	for _, id := range ids {
		if id != s.id {
			keys = append(keys, sharePrefix+id)
		}
	}
	var blobs []shareBlob
	if len(keys) > 0 {
		vals, err := s.c.Do(ctx, s.c.B().Mget().Key(keys...).Build()).ToArray()
		if err != nil {
			return fmt.Errorf("dashboard: redis: %w", err)
		}
		for _, v := range vals {
			str, err := v.ToString()
			if err != nil {
				continue // expired
			}
			var ob shareBlob
			if json.Unmarshal([]byte(str), &ob) == nil {
				blobs = append(blobs, ob)
			}
		}
	}
	s.merge(info, blobs, from+shareLead, now-1)
	return nil
}

// merge replaces the remote sums of the seconds from..until with the
// blobs' (other instances'). A limit's remote series that the blobs
// counted nothing in for the Window ending at until (they stopped naming
// it, or named it with zeros only) is freed first, so that its room goes
// to a name without one.
func (s *Share) merge(self Instance, blobs []shareBlob, from, until int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := from; t <= until; t++ {
		i := t % Window
		if s.stamps[i] != t {
			for _, rs := range s.remote {
				rs.pts[i] = Point{}
			}
			s.stamps[i] = t
		}
		for _, rs := range s.remote {
			rs.pts[i] = Point{}
		}
	}
	for name, rs := range s.remote {
		if name != "all" && name != "other" && rs.last <= until-Window {
			delete(s.remote, name)
			s.limits--
		}
	}
	tops := [][]Hitter{}
	s.instances = []Instance{self}
	for _, b := range blobs {
		s.instances = append(s.instances, b.Instance)
		tops = append(tops, b.Top)
		for name, pts := range b.Points {
			var rs *remoteSeries
			for k, p := range pts {
				t := b.From + int64(k)
				if t < from || t > until || p == (Point{}) {
					continue
				}
				if rs == nil {
					rs = s.ring(name)
				}
				rs.pts[t%Window].Decisions += p.Decisions
				rs.pts[t%Window].Denied += p.Denied
				rs.last = max(rs.last, t)
			}
		}
	}
	s.top = MergeHitters(DefaultHitters, tops...)
}

// ring returns the remote series of a name, made when the blobs first
// count something in it: "all" and "other" always have one, and at most
// MaxSeries limits have their own at once; the counts of further limits
// go to "other", as a Recorder's do. s.mu must be held.
func (s *Share) ring(name string) *remoteSeries {
	if rs := s.remote[name]; rs != nil {
		return rs
	}
	if name != "all" && name != "other" && s.limits >= MaxSeries {
		name = "other"
		if rs := s.remote[name]; rs != nil {
			return rs
		}
	}
	rs := &remoteSeries{}
	s.remote[name] = rs
	if name != "all" && name != "other" {
		s.limits++
	}
	return rs
}

// addRemote adds the other instances' counts to local, a result of
// Recorder.Counts for the seconds since+1..until.
func (s *Share) addRemote(local map[string][]Point, since, until int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := max(since+1, until-Window+1)
	for name, rs := range s.remote {
		pts := local[name]
		if pts == nil {
			pts = make([]Point, until-from+1)
			local[name] = pts
		}
		for k := range pts {
			t := from + int64(k)
			if s.stamps[t%Window] != t {
				continue
			}
			pts[k].Decisions += rs.pts[t%Window].Decisions
			pts[k].Denied += rs.pts[t%Window].Denied
		}
	}
}

// Instances returns the instances seen at the last merge, this one first.
func (s *Share) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Instance(nil), s.instances...)
}

// Top returns the other instances' heavy hitters.
func (s *Share) Top() []Hitter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Hitter(nil), s.top...)
}
