package redisstore

import (
	"testing"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/storetest"
)

func TestStoreStandalone(t *testing.T) {
	s := newStandalone(t)
	storetest.Run(t, func(t *testing.T) limiter.Store { return s })
}

func TestStoreCluster(t *testing.T) {
	s := newCluster(t)
	storetest.Run(t, func(t *testing.T) limiter.Store { return s })
}

func TestReservationsStandalone(t *testing.T) {
	s := newStandalone(t)
	storetest.RunReservations(t, func(t *testing.T) limiter.Store { return s })
}

func TestReservationsCluster(t *testing.T) {
	s := newCluster(t)
	storetest.RunReservations(t, func(t *testing.T) limiter.Store { return s })
}
