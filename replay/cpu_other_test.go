//go:build !unix

package replay

// cpuSeconds is not measured here.
func cpuSeconds() float64 { return 0 }
