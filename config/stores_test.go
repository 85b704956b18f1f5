package config

// The stores register the schemes server.store is checked against, as the
// binary that imports them does.
import (
	_ "github.com/floodgate/floodgate/store/memstore"
	_ "github.com/floodgate/floodgate/store/redisstore"
)
