// Package watch follows configuration files by polling, and hands over a
// new version only once it has stopped changing.
//
// Run looks at a set of files every interval (DefaultInterval, one second,
// by default): it reads each file and notes its size, modification time
// and the SHA-256 of its contents. A version is applied only when two
// consecutive looks, at least one interval apart, saw exactly the same
// thing, so a file caught in the middle of being written is never applied,
// even when its first half happens to be valid. A file replaced by an
// atomic rename (as editors, configuration tools and Kubernetes' symbolic
// link swaps of mounted ConfigMaps do) is applied at the first look that
// confirms it, one interval after the look that saw it first. The bytes
// handed over are the bytes that were hashed: a Version is never read a
// second time.
//
// Both the policy file (package policy) and the rate-limit service's
// descriptor files (package rls) are followed this way.
package watch
