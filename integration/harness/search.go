package harness

import (
	"archive/zip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The search server versions the harness runs. Keep them in step with
// integration/search/pom.xml.
const (
	OpenSearchVersion    = "2.19.6"
	ElasticsearchVersion = "8.19.7"
)

// SearchEngine names a search server distribution.
type SearchEngine string

const (
	OpenSearch    SearchEngine = "opensearch"
	Elasticsearch SearchEngine = "elasticsearch"
)

// searchDistTimeout bounds the one-time Maven fetch of the distributions.
const searchDistTimeout = 10 * time.Minute

// SearchOptions tunes a throwaway single-node search server.
type SearchOptions struct {
	// Settings are extra or overriding node settings, each passed as
	// -E name=value. The network, port and path settings belong to the
	// harness.
	Settings map[string]string
	// Heap is the JVM heap (-Xms and -Xmx), default "512m".
	Heap string
	// StartTimeout bounds a start, from the JVM's launch to a cluster
	// health of at least yellow (default 3m: two cores and a cold JVM).
	StartTimeout time.Duration
}

// SearchNode is a running throwaway OpenSearch or Elasticsearch node:
// single-node discovery, HTTP on 127.0.0.1 without security, run from the
// Maven-fetched distribution (the minimal "integ-test" zip) on the
// machine's Java 17+, under a non-root service user when the tests run as
// root (both servers refuse root).
type SearchNode struct {
	Engine  SearchEngine
	Version string
	Host    string
	// Port is the HTTP port, TransportPort the node-to-node one.
	Port          int
	TransportPort int
	// URL is the HTTP endpoint, http://127.0.0.1:<Port>.
	URL string
	// Dir holds the node's config, data, logs and temp dirs.
	Dir string

	home    string // the extracted distribution
	env     []string
	args    []string
	cred    *syscall.Credential
	timeout time.Duration
	log     string // the node's console output

	mu     sync.Mutex
	proc   *process
	paused bool
	dist   *searchDist
}

// StartOpenSearch starts an OpenSearch node for a test and stops it at
// cleanup. A missing Java, distribution (and no Maven to fetch it) or
// service user skips the test, except in CI where it fails it.
func StartOpenSearch(t testing.TB, opts ...SearchOptions) *SearchNode {
	t.Helper()
	return serverT(t, opts, func(ctx context.Context, o SearchOptions) (*SearchNode, error) {
		return StartSearch(ctx, OpenSearch, o)
	})
}

// StartElasticsearch is StartOpenSearch for Elasticsearch.
func StartElasticsearch(t testing.TB, opts ...SearchOptions) *SearchNode {
	t.Helper()
	return serverT(t, opts, func(ctx context.Context, o SearchOptions) (*SearchNode, error) {
		return StartSearch(ctx, Elasticsearch, o)
	})
}

// StartSearch starts a node of engine on random 127.0.0.1 ports in a new
// temp dir and returns once its cluster health is at least yellow. Stop it
// with Stop. Tests share one node per package (a JVM start takes tens of
// seconds): start it from TestMain or behind a sync.Once.
func StartSearch(ctx context.Context, engine SearchEngine, opts SearchOptions) (*SearchNode, error) {
	version, ok := map[SearchEngine]string{OpenSearch: OpenSearchVersion, Elasticsearch: ElasticsearchVersion}[engine]
	if !ok {
		return nil, fmt.Errorf("unknown search engine %q (want %q or %q)", engine, OpenSearch, Elasticsearch)
	}
	java, err := JavaBinary()
	if err != nil {
		return nil, err
	}
	javaHome, err := javaHomeOf(java)
	if err != nil {
		return nil, err
	}
	cred, uid, gid, err := serviceUser("nobody")
	if err != nil {
		return nil, err
	}
	zipPath, err := SearchDistZip(ctx, engine)
	if err != nil {
		return nil, err
	}
	dist, err := acquireDist(engine, version, zipPath)
	if err != nil {
		return nil, err
	}
	dir, err := mkTemp("sluice-"+string(engine)+"-", uid, gid)
	if err != nil {
		dist.release()
		return nil, err
	}
	n := &SearchNode{Engine: engine, Version: version, Host: "127.0.0.1", Dir: dir, home: dist.home, cred: cred,
		timeout: opts.StartTimeout, log: filepath.Join(dir, "console.log"), dist: dist}
	if n.timeout <= 0 {
		n.timeout = 3 * time.Minute
	}
	if err := n.prepare(javaHome, uid, gid, opts); err != nil {
		os.RemoveAll(dir)
		dist.release()
		return nil, err
	}
	node, err := retryPortClash(ctx, dir, func() (*SearchNode, error) {
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		n.Port, n.TransportPort = ports[0], ports[1]
		n.URL = "http://" + n.Host + ":" + strconv.Itoa(n.Port)
		return n, n.start(ctx)
	})
	if err != nil {
		dist.release()
		return nil, err
	}
	return node, nil
}

// prepare lays out the node dir (a copy of the distribution's config,
// data, logs and tmp, all owned by the service user) and the environment.
func (n *SearchNode) prepare(javaHome string, uid, gid int, opts SearchOptions) error {
	conf := filepath.Join(n.Dir, "config")
	if err := copyTree(filepath.Join(n.home, "config"), conf); err != nil {
		return fmt.Errorf("copy %s config: %w", n.Engine, err)
	}
	for _, d := range []string{"data", "logs", "tmp"} {
		if err := os.Mkdir(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := n.absoluteJVMPaths(filepath.Join(conf, "jvm.options")); err != nil {
		return err
	}
	// The node writes its keystore into the config dir and gc.log,
	// heap dumps and temp files under its working dir.
	if err := chownTree(n.Dir, uid, gid); err != nil {
		return err
	}
	heap := opts.Heap
	if heap == "" {
		heap = "512m"
	}
	prefix := "OPENSEARCH"
	if n.Engine == Elasticsearch {
		prefix = "ES"
	}
	n.env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + n.Dir,
		"LANG=C.UTF-8",
		prefix + "_JAVA_HOME=" + javaHome,
		prefix + "_PATH_CONF=" + conf,
		prefix + "_JAVA_OPTS=" + strings.Join(append([]string{"-Xms" + heap, "-Xmx" + heap}, TestJVMFlags()...), " "),
		prefix + "_TMPDIR=" + filepath.Join(n.Dir, "tmp"),
	}
	settings := map[string]string{
		"cluster.name":   "sluice-test",
		"node.name":      "sluice-" + string(n.Engine),
		"discovery.type": "single-node",
		// A nearly full disk in CI must not turn indices read-only.
		"cluster.routing.allocation.disk.threshold_enabled": "false",
	}
	if n.Engine == Elasticsearch {
		// The integ-test zip carries the security module, which is on by
		// default (TLS and passwords); the tests speak plain HTTP.
		settings["xpack.security.enabled"] = "false"
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	for _, k := range []string{"network.host", "http.port", "transport.port", "path.data", "path.logs"} {
		delete(settings, k)
	}
	settings["network.host"] = n.Host
	settings["path.data"] = filepath.Join(n.Dir, "data")
	settings["path.logs"] = filepath.Join(n.Dir, "logs")
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n.args = append(n.args, "-E", k+"="+settings[k])
	}
	return nil
}

// absoluteJVMPaths points the GC log, error file and heap dump paths of a
// jvm.options file, relative to the distribution's home (where the start
// script runs the JVM, not writable by the service user), into the node
// dir.
func (n *SearchNode) absoluteJVMPaths(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	logs, data := filepath.Join(n.Dir, "logs"), filepath.Join(n.Dir, "data")
	r := strings.NewReplacer("file=logs/", "file="+logs+"/", "ErrorFile=logs/", "ErrorFile="+logs+"/",
		"HeapDumpPath=data", "HeapDumpPath="+data)
	return os.WriteFile(path, []byte(r.Replace(string(b))), 0o644)
}

// start launches the node on n.Port and waits for its cluster health.
func (n *SearchNode) start(ctx context.Context) error {
	lf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := append(append([]string{}, n.args...), "-E", "http.port="+strconv.Itoa(n.Port),
		"-E", "transport.port="+strconv.Itoa(n.TransportPort))
	cmd := exec.Command(filepath.Join(n.home, "bin", string(n.Engine)), args...)
	cmd.Dir = n.Dir
	cmd.Env = n.env
	cmd.Stdout, cmd.Stderr = lf, lf
	if n.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	}
	proc, err := startProcess(cmd)
	lf.Close()
	if err != nil {
		return fmt.Errorf("start %s: %w", n.Engine, err)
	}
	n.mu.Lock()
	n.proc, n.paused = proc, false
	n.mu.Unlock()
	client := &http.Client{Timeout: 5 * time.Second}
	err = waitForCtx(ctx, string(n.Engine), n.timeout, proc.exited, n.log, func() error {
		return n.health(ctx, client)
	})
	if err != nil {
		n.stopProc(syscall.SIGKILL, 5*time.Second)
		return fmt.Errorf("%w\n%s", err, n.serverLog())
	}
	return nil
}

// health succeeds once the cluster health is yellow or green.
func (n *SearchNode) health(ctx context.Context, client *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL+"/_cluster/health?wait_for_status=yellow&timeout=1s", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var h struct {
		Status string `json:"status"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &h) != nil || (h.Status != "yellow" && h.Status != "green") {
		return fmt.Errorf("cluster health: %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// Log returns the tail of the node's console output.
func (n *SearchNode) Log() string { return tail(n.log, 8000) }

// serverLog returns the tail of the node's own log file (its exceptions
// in full), which the console may lack.
func (n *SearchNode) serverLog() string {
	return tail(filepath.Join(n.Dir, "logs", "sluice-test.log"), 6000)
}

// Stop shuts the node down (SIGTERM, then SIGKILL after 30s) and removes
// its directory. Stopping twice is harmless.
func (n *SearchNode) Stop() error {
	err := n.stopProc(syscall.SIGTERM, 30*time.Second)
	os.RemoveAll(n.Dir)
	n.mu.Lock()
	d := n.dist
	n.dist = nil
	n.mu.Unlock()
	if d != nil {
		d.release()
	}
	return err
}

// Kill stops the node with SIGKILL and keeps its directory (crash and
// outage tests; see Restart). Stop still removes the directory afterwards.
func (n *SearchNode) Kill() { _ = n.stopProc(syscall.SIGKILL, 5*time.Second) }

// Restart starts the node again on the same directory and ports, so it
// recovers its data: after a Kill or on a running node (which is stopped
// cleanly first). It returns once the cluster health is yellow again.
func (n *SearchNode) Restart(ctx context.Context) error {
	_ = n.stopProc(syscall.SIGTERM, 30*time.Second)
	return n.start(ctx)
}

// Pause freezes the node's processes (SIGSTOP) and returns once every
// thread of them is stopped: connections are accepted by the kernel but
// nothing answers, as with a node that hangs or a network that drops
// packets. Resume undoes it.
func (n *SearchNode) Pause() error {
	if err := n.signalPaused(syscall.SIGSTOP, true); err != nil {
		return err
	}
	n.mu.Lock()
	pgid := n.proc.cmd.Process.Pid
	n.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for !groupStopped(pgid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s node: not every thread stopped within 10s of SIGSTOP", n.Engine)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// groupStopped reports whether every thread of every process in process
// group pgid is stopped (state T or t in /proc).
func groupStopped(pgid int) bool {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	found := false
	for _, st := range stats {
		state, pgrp, ok := procState(st)
		if !ok || pgrp != pgid {
			continue
		}
		found = true
		if state != 'T' && state != 't' {
			return false
		}
		tasks, _ := filepath.Glob(filepath.Join(filepath.Dir(st), "task", "*", "stat"))
		for _, ts := range tasks {
			if state, _, ok := procState(ts); ok && state != 'T' && state != 't' {
				return false
			}
		}
	}
	return found
}

// procState reads the state and process group of a /proc stat file
// ("pid (comm) state ppid pgrp …"; comm may hold spaces and parens).
func procState(path string) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	return f[0][0], pgrp, err == nil
}

// Resume continues a paused node (SIGCONT).
func (n *SearchNode) Resume() error { return n.signalPaused(syscall.SIGCONT, false) }

func (n *SearchNode) signalPaused(sig syscall.Signal, paused bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return errors.New("node not running")
	}
	select {
	case <-n.proc.exited:
		return errors.New("node not running")
	default:
	}
	if err := syscall.Kill(-n.proc.cmd.Process.Pid, sig); err != nil {
		return err
	}
	n.paused = paused
	return nil
}

// stopProc signals the node's whole process group (Elasticsearch runs the
// server JVM as a child of its launcher JVM), waits up to grace for every
// process of the group to be gone and kills what is left.
func (n *SearchNode) stopProc(sig syscall.Signal, grace time.Duration) error {
	n.mu.Lock()
	p, paused := n.proc, n.paused
	n.paused = false
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, sig)
	if paused && sig != syscall.SIGKILL {
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
	}
	if groupGone(pgid, p.exited, grace) {
		return nil
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	groupGone(pgid, p.exited, 10*time.Second)
	if sig == syscall.SIGKILL {
		return nil
	}
	return errors.New("search node did not stop in time and was killed")
}

// groupGone waits until the leader exited and no process of the group is
// left (Kill(-pgid, 0) fails), at most timeout.
func groupGone(pgid int, exited <-chan struct{}, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			if syscall.Kill(-pgid, 0) != nil {
				return true
			}
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

// SearchDistZip returns the path of engine's distribution zip: in the
// directory named by SLUICE_SEARCH_DIST, else in the cache
// ${SLUICE_CACHE:-$HOME/.cache/sluice}/search, which is filled first by
// running scripts/search-dist.sh (Maven) from the module root when the zip
// is missing.
func SearchDistZip(ctx context.Context, engine SearchEngine) (string, error) {
	version := OpenSearchVersion
	if engine == Elasticsearch {
		version = ElasticsearchVersion
	}
	name := string(engine) + "-" + version + ".zip"
	if d := os.Getenv("SLUICE_SEARCH_DIST"); d != "" {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("SLUICE_SEARCH_DIST=%s holds no %s", d, name)
		}
		return p, nil
	}
	cache, err := cacheRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "search")
	p := filepath.Join(dir, name)
	if st, err := os.Stat(p); err == nil && st.Size() > 0 {
		return p, nil
	}
	if err := runCacheScript(ctx, cache, "search-dist.sh", dir, "the "+name+" distribution", searchDistTimeout); err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("scripts/search-dist.sh left no %s in %s", name, dir)
	}
	return p, nil
}

// searchDist is a distribution extracted into a temp dir that the service
// user can read, shared by the nodes of one test process and removed when
// the last of them stops.
type searchDist struct {
	key  string
	root string // the temp dir
	home string // root/<engine>-<version>
	refs int
}

var (
	distMu sync.Mutex
	dists  = map[string]*searchDist{}
)

func acquireDist(engine SearchEngine, version, zipPath string) (*searchDist, error) {
	distMu.Lock()
	defer distMu.Unlock()
	key := string(engine) + "-" + version
	if d := dists[key]; d != nil {
		d.refs++
		return d, nil
	}
	root, err := os.MkdirTemp("", "sluice-"+key+"-dist-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(root, 0o755); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	if err := unzip(zipPath, root); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("extract %s: %w", zipPath, err)
	}
	home := filepath.Join(root, key)
	if _, err := os.Stat(filepath.Join(home, "bin", string(engine))); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("%s holds no %s/bin/%s", zipPath, key, engine)
	}
	d := &searchDist{key: key, root: root, home: home, refs: 1}
	dists[key] = d
	return d, nil
}

func (d *searchDist) release() {
	distMu.Lock()
	defer distMu.Unlock()
	if d.refs--; d.refs > 0 {
		return
	}
	delete(dists, d.key)
	os.RemoveAll(d.root)
}

// unzip extracts the zip at path into dir, keeping the files' modes
// (world-readable, as the service user needs them).
func unzip(path, dir string) error {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return err
	}
	defer zr.Close()
	for _, f := range zr.File {
		name := filepath.Clean(filepath.FromSlash(f.Name))
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("entry %q escapes the target dir", f.Name)
		}
		target := filepath.Join(dir, name)
		mode := f.Mode()
		switch {
		case mode.IsDir():
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			continue
		case mode&os.ModeSymlink != 0:
			return fmt.Errorf("entry %q is a symlink", f.Name)
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := extractFile(f, target, mode.Perm()|0o444); err != nil {
			return err
		}
	}
	return nil
}

func extractFile(f *zip.File, target string, perm os.FileMode) error {
	rc, err := f.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, rc); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copyTree copies the regular files and dirs under src to dst.
func copyTree(src, dst string) error {
	return filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}

// chownTree hands dir and everything under it to uid:gid.
func chownTree(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// javaHomeOf returns the JDK home of a java binary (symlinks resolved):
// the parent of its bin dir.
func javaHomeOf(java string) (string, error) {
	p, err := filepath.EvalSymlinks(java)
	if err != nil {
		return "", fmt.Errorf("java %s: %w", java, err)
	}
	return filepath.Dir(filepath.Dir(p)), nil
}
