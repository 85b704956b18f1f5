package rawconn

// Leftover is what a socket has to read that nobody asked for yet (Look).
type Leftover uint8

const (
	// Nothing: the socket is quiet.
	Nothing Leftover = iota
	// Bytes: bytes are there to read.
	Bytes
	// End: the other end closed the connection, or it broke.
	End
)
