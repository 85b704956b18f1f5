//go:build !linux

package watch

// newNotifier returns nil: without inotify, Run polls alone and the
// stability rule decides every version.
func newNotifier() notifier { return nil }
