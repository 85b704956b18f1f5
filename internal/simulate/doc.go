// Package simulate is floodgate simulate: a request pattern replayed
// through one algorithm (package algo), exactly as the library decides it,
// with every decision and a summary as a table or JSON. With several
// instances it compares independent per-instance limits
// (algo.SplitLimit) with one shared limit and counts the requests wrongly
// denied (seed 002). docs/simulate.md shows its use.
package simulate
