package lograte

import (
	"fmt"
	"strings"
)

// Count reads back a log of text lines (slog's text or JSON form): how
// many lines hold sub, and how many lines those say were held back before
// them (their not_logged_since values), so that a flood's every line can
// be accounted for. It fails on a not_logged_since that is no number.
func Count(log, sub string) (lines int, held int64, err error) {
	for l := range strings.SplitSeq(log, "\n") {
		if !strings.Contains(l, sub) {
			continue
		}
		lines++
		_, v, ok := strings.Cut(l, "not_logged_since=")
		if !ok {
			_, v, ok = strings.Cut(l, `"not_logged_since":`)
		}
		if ok {
			var n int64
			if _, err := fmt.Sscan(v, &n); err != nil {
				return 0, 0, fmt.Errorf("lograte: %q: %w", l, err)
			}
			held += n
		}
	}
	return lines, held, nil
}
