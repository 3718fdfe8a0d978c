package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// memCgroup is a memory cgroup a daemon runs in: the kernel holds the
// daemon's memory, anonymous and page cache alike, to the cgroup's limit,
// reclaiming file pages (code, mapped index segments, written files) and
// killing the process when what it cannot reclaim passes the limit. It is
// how a container limit bounds the daemon, so a drain that finishes in one
// shows the daemon works within that much memory. cgroup v1's memory
// controller and cgroup v2 are both supported; creating one needs root.
type memCgroup struct {
	dir string
	v2  bool
}

// newMemCgroup creates the cgroup name with the limit in bytes.
func newMemCgroup(name string, limit int64) (*memCgroup, error) {
	c := &memCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", name)}
	limitFile := "memory.limit_in_bytes"
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		c = &memCgroup{dir: filepath.Join("/sys/fs/cgroup", name), v2: true}
		limitFile = "memory.max"
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("memory cgroup: %w (needs root and a mounted memory controller)", err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		_ = c.remove()
		return nil, fmt.Errorf("memory cgroup: set the limit: %w", err)
	}
	return c, nil
}

// command is exec.Command(bin, args...) started inside the cgroup: a
// shell moves itself into it and then becomes bin, so every page bin
// touches is charged to the cgroup from its first instruction.
func (c *memCgroup) command(bin string, args ...string) *exec.Cmd {
	script := `echo $$ > "` + filepath.Join(c.dir, "cgroup.procs") + `" && exec "$0" "$@"`
	return exec.Command("/bin/sh", append([]string{"-c", script, bin}, args...)...)
}

// read is the content of the cgroup's file v1 (cgroup v1) or v2.
func (c *memCgroup) read(v1, v2 string) (string, error) {
	name := v1
	if c.v2 {
		name = v2
	}
	b, err := os.ReadFile(filepath.Join(c.dir, name))
	return string(b), err
}

// peak is the cgroup's highest charge in bytes: the daemon's memory and
// the page cache of its files.
func (c *memCgroup) peak() (float64, error) {
	s, err := c.read("memory.max_usage_in_bytes", "memory.peak")
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(strings.TrimSpace(s), 64)
}

// oomKills is how many processes the kernel killed for the cgroup's limit.
func (c *memCgroup) oomKills() (int, error) {
	s, err := c.read("memory.oom_control", "memory.events")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(s, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "oom_kill" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, errors.New("memory cgroup: no oom_kill count")
}

// remove deletes the cgroup; its processes must have exited.
func (c *memCgroup) remove() error { return os.Remove(c.dir) }
