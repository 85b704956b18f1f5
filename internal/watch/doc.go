// Package watch follows configuration files and hands over a new version
// only once it is whole.
//
// Run looks at a set of files every interval (DefaultInterval, one second,
// by default): it reads each file and notes its size, modification time
// and the SHA-256 of its contents. The bytes handed over are the bytes
// that were hashed: a Version is never read a second time. On Linux, Run
// also reads the file system's events (inotify) on the files' directories,
// and on those of the files symbolic links among them lead to, at every
// look; and any event in those directories wakes it (through
// github.com/fsnotify/fsnotify) for a look of its own, a few milliseconds
// later, that applies a version only by the event rule below and does not
// count for the stability rule. (fsnotify does not report a writer's
// close, which the rules need; so the rules read inotify themselves, and
// fsnotify only wakes Run.) Three rules decide:
//
//   - A write in progress holds everything back: a file that was modified
//     (written to, truncated, created) and that its writer has not closed
//     since is not applied, nor is any other version, until the writer
//     closes it, or until HoldOpen (one minute by default) has passed
//     since its last write with the file still open.
//   - The event rule: when, since the previous look, a writer closed one of
//     the files, or a new file in one of their directories, after writing
//     (close-write) or an entry was renamed into place in one of the
//     directories (an editor's or a tool's atomic rename, Kubernetes' swap
//     of a mounted ConfigMap's ..data link), the look applies what it
//     reads, at once; the removal of the directory a swapped link led to
//     (the kubelet removes the old version's right after the swap) loses
//     nothing, as no followed path leads there any more. A file removed is
//     left to the stability rule.
//   - The stability rule: a version is applied when two consecutive looks,
//     at least one interval apart, saw exactly the same paths, sizes,
//     modification times and contents.
//
// A look during which an event about the files arrived (they changed while
// they were read) applies nothing, and the next look does not count it as
// agreeing with anything.
//
// What that guarantees. With the events, a file written in place while Run
// follows it is never applied half written, however long its writer
// stalls, as long as the writer keeps it open for less than HoldOpen after
// its last write (a write begun before Run started is known only to the
// stability rule); a file closed or renamed into place is applied within
// milliseconds by the look its events wake (or, should that look find the
// files changing again, at a later one). The one gap is a write that
// begins at the very instant of a look, just after a close: for the microseconds before its event is
// queued, the look can read its first bytes as whole; the whole file then
// replaces them once its writer closes it. Without the events (systems
// other than Linux, Options.PollOnly, a network file system changed from
// another machine, a directory that could not be watched, or events lost
// to a full queue, for that look) the stability rule alone decides: a writer
// that stalls for less than one interval is never applied half written,
// and one that stalls for longer may be. A new version is then applied one
// to two intervals after the change.
//
// Both the policy file (package policy) and the rate-limit service's
// descriptor files (package rls) are followed this way.
package watch
