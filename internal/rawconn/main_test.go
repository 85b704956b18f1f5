package rawconn

import (
	"testing"

	"github.com/floodgate/floodgate/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
