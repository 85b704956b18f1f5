// Package floodgate holds the vocabulary shared by every part of Floodgate:
// limits, decisions and the errors a decision can end in.
//
// It has no dependencies beyond the standard library. The algorithms live in
// package algo, the engine that checks many limits at once in package limiter,
// and the stores in store/memstore and store/redisstore.
package floodgate
