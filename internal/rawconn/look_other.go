//go:build !unix

package rawconn

// Look cannot look without MSG_PEEK: it says Nothing.
func Look(uintptr) Leftover { return Nothing }
