package app

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// The cgroup paths the soft memory limit reads the container's memory
// limit from.
const (
	cgroupRoot     = "/sys/fs/cgroup"
	selfCgroupFile = "/proc/self/cgroup"
)

// ceilingShare is the share of the container's memory limit that the soft
// memory limit may reach: the rest is for what the runtime does not count
// (the kernel's socket buffers and page tables charged to the same
// cgroup, memory the runtime has not returned yet).
const ceilingShare = 0.9

// containerMemoryMax returns the memory limit of the cgroup this process
// runs in, 0 when there is none or it cannot be read: under cgroup v2
// the least memory.max of the process's cgroup and the cgroups above it,
// under v1 the memory controller's memory.limit_in_bytes. root is where
// the cgroup file systems are mounted (/sys/fs/cgroup) and self the
// process's cgroup list (/proc/self/cgroup). In a container with a cgroup
// namespace the process's cgroup reads as "/", the container's own.
func containerMemoryMax(root, self string) int64 {
	b, err := os.ReadFile(self)
	if err != nil {
		return 0
	}
	var least int64
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		ctrls, p, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(p, "/") {
			continue
		}
		var v int64
		switch {
		case id == "0" && ctrls == "":
			v = leastV2(root, p)
		case hasController(ctrls, "memory"):
			v = readLimit(filepath.Join(root, "memory", path.Clean(p), "memory.limit_in_bytes"))
			if v == 0 && p != "/" {
				// The v1 path is the host's while the mount is the
				// container's own.
				v = readLimit(filepath.Join(root, "memory", "memory.limit_in_bytes"))
			}
		}
		if v > 0 && (least == 0 || v < least) {
			least = v
		}
	}
	return least
}

// leastV2 returns the least memory.max from the cgroup p up to the root
// of the v2 hierarchy mounted at root, 0 when none is set.
func leastV2(root, p string) int64 {
	var least int64
	for p = path.Clean(p); ; p = path.Dir(p) {
		if v := readLimit(filepath.Join(root, p, "memory.max")); v > 0 && (least == 0 || v < least) {
			least = v
		}
		if p == "/" {
			return least
		}
	}
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimit reads a cgroup memory limit in bytes: 0 for "max", a value so
// large it means none (v1 writes the largest page multiple), or a file
// that is missing or holds something else.
func readLimit(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v >= 1<<62 {
		return 0
	}
	return v
}
